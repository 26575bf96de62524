-- Live customers: tombstones (deleted in the source) left out.
select id as customer_id, name, email, tier, tags, created_at
from {{ source('demo', 'customers') }}
where not _deleted
