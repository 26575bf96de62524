{#
  Registers every dbt source table (a silver Delta table of the lake) by name:
  database = the source's schema, table = its name, data at
  <lake_root>/<ingest source>/<table>/silver. A view over the Delta path:
  registering never touches the data, a view reads the table's newest version,
  and a view registered earlier for another lake root is replaced.
#}
{% macro register_silver_tables() %}
  {% if execute %}
  {% for node in graph.sources.values() %}
    {% set ingest = node.meta.get('ingest', {}) %}
    {% set path = silver_path(ingest.get('source', node.source_name), ingest.get('lake_table', node.name)) %}
    {% do run_query("create database if not exists " ~ node.schema) %}
    {% do run_query("create or replace view " ~ node.schema ~ "." ~ node.name ~ " as select * from delta.`"
                    ~ path ~ "`") %}
  {% endfor %}
  {% endif %}
{% endmacro %}

{#
  A table or incremental model (written under location_root) whose name the catalog still ties to another
  location, e.g. another lake served by the same Spark server, is unregistered first: its
  CREATE OR REPLACE would fail on the mismatch. The table is external (it has a location), so
  DROP TABLE forgets the name and leaves the files.
#}
{% macro release_moved_models() %}
  {% if execute %}
  {% for node in graph.nodes.values() %}
    {% if node.resource_type == 'model' and node.config.materialized in ('table', 'incremental')
          and node.config.location_root %}
      {% set name = node.schema ~ "." ~ node.alias %}
      {% do run_query("create database if not exists " ~ node.schema) %}
      {% if run_query("show tables in " ~ node.schema ~ " like '" ~ node.alias ~ "'") | length > 0 %}
        {% set registered = run_query("describe detail " ~ name).columns['location'].values()[0] %}
        {% set wanted = node.config.location_root ~ "/" ~ node.alias %}
        {% if registered.split(':', 1)[-1].strip('/') != wanted.split(':', 1)[-1].strip('/') %}
          {% do log("dbt table " ~ name ~ " was registered at " ~ registered ~ "; registering it at " ~ wanted, info=true) %}
          {# through the adapter, so that dbt's cache of relations forgets it too: an incremental model
             then builds afresh instead of merging into a table no longer there #}
          {% do adapter.drop_relation(api.Relation.create(schema=node.schema, identifier=node.alias,
                                                          type='table')) %}
        {% endif %}
      {% endif %}
    {% endif %}
  {% endfor %}
  {% endif %}
{% endmacro %}

{# Models land in the schema they name (staging, marts), not <target schema>_<name>. #}
{% macro generate_schema_name(custom_schema_name, node) -%}
  {{ custom_schema_name | trim if custom_schema_name else target.schema }}
{%- endmacro %}
