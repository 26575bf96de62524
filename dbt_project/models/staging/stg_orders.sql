-- Live orders.
select id as order_id, customer_id, ordered_at, status, total
from {{ source('demo', 'orders') }}
where not _deleted
