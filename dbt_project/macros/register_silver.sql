{#
  Registers every dbt source table (a silver Delta table of the lake) by name:
  database = the source's schema, table = its name, data at
  <lake_root>/<ingest source>/<table>/silver. IF NOT EXISTS: registering never
  touches the data, and a table registered earlier stays as it is.
#}
{% macro register_silver_tables() %}
  {% if execute %}
  {% set lake_root = var('lake_root', env_var('INGEST_LAKE_ROOT', '../.local/lake')) %}
  {% for node in graph.sources.values() %}
    {% set ingest = node.meta.get('ingest', {}) %}
    {% set lake_source = ingest.get('source', node.source_name) %}
    {% set lake_table = ingest.get('lake_table', node.name) %}
    {% do run_query("create database if not exists " ~ node.schema) %}
    {% do run_query("create table if not exists " ~ node.schema ~ "." ~ node.name ~ " using delta location '"
                    ~ lake_root ~ "/" ~ lake_source ~ "/" ~ lake_table ~ "/silver'") %}
  {% endfor %}
  {% endif %}
{% endmacro %}

{# Models land in the schema they name (staging, marts), not <target schema>_<name>. #}
{% macro generate_schema_name(custom_schema_name, node) -%}
  {{ custom_schema_name | trim if custom_schema_name else target.schema }}
{%- endmacro %}
