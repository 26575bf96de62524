{#
  Customers as silver holds them (deleted ones as tombstones, `_deleted`), kept current from silver's
  change data feed: an incremental run reads only the changes silver committed after the newest silver
  version this table holds (`_silver_version`), and merges each customer's newest change. A full
  rebuild (the first run, or --full-refresh) reads silver whole; both give the same rows.
#}
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='customer_id',
          pre_hook="set spark.databricks.delta.changeDataFeed.timestampOutOfRange.enabled = true") }}
-- depends_on: {{ source('demo', 'customers') }}
{%- set path = silver_path('demo', 'customers') %}
{%- if is_incremental() %}
-- changes after the newest version merged here; none yet: an empty read, not an error (the pre-hook)
select customer_id, name, email, tier, tags, created_at, _deleted, _silver_version
from (
  select id as customer_id, name, email, tier, tags, created_at,
         _deleted or _change_type = 'delete' as _deleted, _commit_version as _silver_version,
         -- a key's newest change; in one version an insert outranks a delete (a rewrite of the table)
         row_number() over (partition by id order by _commit_version desc,
                            case _change_type when 'delete' then 0 else 1 end desc) as _newest
  from table_changes_by_path('{{ path }}', {{ next_silver_version(this) }})
  where _change_type <> 'update_preimage'
)
where _newest = 1
{%- else %}
select id as customer_id, name, email, tier, tags, created_at, _deleted,
       cast({{ silver_version(path) }} as bigint) as _silver_version
from delta.`{{ path }}`
{%- endif %}
