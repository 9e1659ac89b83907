// A page opened on its own (a link in an approval form, a bookmark) reopens inside Airflow's navigation:
// Airflow frames any path of the plugin's view at <base>/plugin/iceberg-maintenance/<path>.
if (window.top === window.self) {
  const path = location.pathname;
  const base = path.slice(0, path.indexOf("/iceberg-maint/"));
  location.replace(base + "/plugin/iceberg-maintenance" + path + location.search + location.hash);
}
