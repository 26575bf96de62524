-- One row per live customer: their live orders counted and summed. A customer
-- with no orders has 0 and a null last order.
with orders as (
    select customer_id,
           count(*) as orders,
           sum(case when status != 'cancelled' then total else 0 end) as revenue,
           max(ordered_at) as last_ordered_at
    from {{ ref('stg_orders') }}
    group by customer_id
)
select c.customer_id, c.name, c.tier,
       coalesce(o.orders, 0) as orders,
       coalesce(o.revenue, cast(0 as decimal(24, 2))) as revenue,
       o.last_ordered_at
from {{ ref('stg_customers') }} c
left join orders o on o.customer_id = c.customer_id
