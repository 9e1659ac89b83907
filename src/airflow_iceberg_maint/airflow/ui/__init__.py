"""The status page's parts: records read in bulk, chart geometry, and the Jinja templates and static files
(``templates/``, ``static/``) that ``airflow.plugin`` serves."""
