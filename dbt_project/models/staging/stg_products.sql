-- Live products; `active` is BIT(1) in the source, bytes in the lake.
select sku, title, price, attributes, active = X'01' as is_active
from {{ source('demo', 'products') }}
where not _deleted
