-- Live order lines.
select order_id, line_no, sku, qty, unit_price, qty * unit_price as line_total
from {{ source('demo', 'order_lines') }}
where not _deleted
