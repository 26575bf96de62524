{# Where a dbt source's silver Delta table is: <lake_root>/<ingest source>/<table>/silver. #}
{% macro silver_path(source_name, table_name) %}
  {%- set lake_root = var('lake_root', env_var('INGEST_LAKE_ROOT', '../.local/lake')) -%}
  {{- lake_root ~ "/" ~ source_name ~ "/" ~ table_name ~ "/silver" -}}
{% endmacro %}

{# The newest version of the Delta table at `path` (read when the model compiles). #}
{% macro silver_version(path) %}
  {%- if execute -%}
    {{- run_query("describe history delta.`" ~ path ~ "` limit 1").columns['version'].values()[0] -}}
  {%- else -%}0{%- endif -%}
{% endmacro %}

{# The first silver version an incremental model has not merged: one past the newest it holds. #}
{% macro next_silver_version(relation) %}
  {%- if execute -%}
    {{- run_query("select coalesce(max(_silver_version), -1) + 1 from " ~ relation).columns[0].values()[0] -}}
  {%- else -%}0{%- endif -%}
{% endmacro %}
