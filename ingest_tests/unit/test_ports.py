"""Ports for the servers this project starts (tests, benchmarks, the embedded Spark Connect server)."""

import socket

from ingest.localdev.processes import EPHEMERAL_RANGE, LOWEST_CHOSEN_PORT, free_port


def test_a_free_port_lies_below_the_ephemeral_range_that_outgoing_connections_take_ports_from():
    low = int(EPHEMERAL_RANGE.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST_CHOSEN_PORT <= p < low for p in ports) and len(ports) > 1
    with socket.socket() as s:  # and a server can bind it
        s.bind(("127.0.0.1", ports.pop()))


def test_a_port_a_server_listens_on_is_passed_over(monkeypatch):
    from ingest.localdev import processes

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        draws = iter([port, port + 1])

        class Chooser:  # the random choice falls on the taken port first
            def randrange(self, lo, hi):
                return next(draws)

        monkeypatch.setattr(processes.random, "SystemRandom", Chooser)
        assert free_port() == port + 1
