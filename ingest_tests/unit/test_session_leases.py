"""Session leases (ingest/lake/sessions.py): a Connect session passes to a later process only when its last
holder released it with nothing running in it."""

from ingest.lake.sessions import acquire, release, slots_folder, url_with_session


class Session:
    def __init__(self, running=(), closed=False):
        self.running, self.closed = list(running), closed

    def interruptAll(self):
        if self.closed:
            raise RuntimeError("the channel is closed")
        return self.running


def test_a_session_released_clean_is_reused_and_one_never_released_is_not(tmp_path):
    first = acquire(tmp_path)
    assert first.slot == 0 and not first.reused
    assert release(first, Session()) is True
    first.lock.close()  # the holding process ends: its flock goes with it
    second = acquire(tmp_path)
    assert (second.slot, second.session_id, second.reused) == (0, first.session_id, True)
    second.lock.close()  # killed: never released, so never marked clean
    third = acquire(tmp_path)
    assert third.session_id != first.session_id and not third.reused


def test_a_session_with_an_operation_still_running_or_a_closed_channel_is_not_handed_on(tmp_path):
    for session in (Session(running=["op-1"]), Session(closed=True)):
        lease = acquire(tmp_path)
        assert release(lease, session) is False
        lease.lock.close()
        assert not acquire(tmp_path).reused


def test_a_held_slot_is_skipped_and_a_discarded_session_stays_dirty(tmp_path):
    held = acquire(tmp_path, slots=2)
    other = acquire(tmp_path, slots=2)  # the first slot is held (by this process, as by any other)
    assert other.slot == 1
    assert acquire(tmp_path, slots=2) is None  # every slot held: the caller gets a session of its own
    other.discard()  # dbt used it
    assert release(other, Session()) is False
    other.lock.close()
    assert not acquire(tmp_path, slots=2).reused
    held.lock.close()


def test_slots_are_per_server_and_the_url_names_the_session(tmp_path):
    assert slots_folder(tmp_path, "sc://h:1", 7) != slots_folder(tmp_path, "sc://h:1", 8)  # a restarted server
    assert slots_folder(tmp_path, "sc://h:1", None) != slots_folder(tmp_path, "sc://h:2", None)
    assert url_with_session("sc://h:1", "abc") == "sc://h:1/;session_id=abc"
    assert url_with_session("sc://h:1/;token=t", "abc") == "sc://h:1/;token=t;session_id=abc"
