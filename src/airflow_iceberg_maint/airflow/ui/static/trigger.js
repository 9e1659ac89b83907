// The manual DAG's parameters as a form, pre-filled from the query string; submitting triggers a run
// through Airflow's REST API with the user's own session.
const dagId = document.body.dataset.dag;
const api = "../api/v2/dags/" + encodeURIComponent(dagId);
const given = new URLSearchParams(location.search);
const form = document.getElementById("form");
function field(name, spec) {
  // Laid out as Airflow's own trigger dialog: the title above its input, the description under it.
  const schema = spec.schema || {};
  const types = [].concat(schema.type || "string");
  const row = document.createElement("div");
  row.className = "field";
  const label = document.createElement("label");
  label.textContent = schema.title || name;
  const input = document.createElement("input");
  input.name = name; input.id = "param-" + name; label.htmlFor = input.id;
  let value = given.has(name) ? given.get(name) : spec.value;
  if (types.includes("boolean")) {
    input.type = "checkbox";
    input.checked = given.has(name) ? given.get(name) === "true" : Boolean(spec.value);
    row.classList.add("switch");
  } else {
    input.type = types.includes("number") || types.includes("integer") ? "number" : "text";
    input.step = "any";
    input.value = value === null || value === undefined ? "" : value;
  }
  input.dataset.types = types.join(",");
  row.append(label, input);
  if (spec.description) { const d = document.createElement("small"); d.className = "muted";
    d.textContent = spec.description; row.appendChild(d); }
  form.insertBefore(row, form.querySelector(".actions"));
}
function conf() {
  const out = {};
  for (const input of form.querySelectorAll("input[name]")) {
    const types = input.dataset.types.split(",");
    if (input.type === "checkbox") out[input.name] = input.checked;
    else if (input.value === "" && types.includes("null")) out[input.name] = null;
    else if (input.type === "number") out[input.name] = Number(input.value);
    else out[input.name] = input.value;
  }
  return out;
}
fetch(api + "/details", {credentials: "same-origin"}).then(r => r.json()).then(dag => {
  for (const [name, spec] of Object.entries(dag.params || {})) field(name, spec);
  document.getElementById("submit").disabled = false;
});
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const result = document.getElementById("result");
  // Say at once that the request is out: on a busy Airflow the answer can take long.
  result.className = "pending"; result.textContent = "Triggering…";
  let response, body;
  try {
    response = await fetch(api + "/dagRuns", {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json"}, body: JSON.stringify({logical_date: null, conf: conf()})});
    const text = await response.text();
    try { body = JSON.parse(text); } catch (e) { body = {detail: response.status + " " + text.slice(0, 500)}; }
  } catch (e) {  // no answer at all: show it, never leave the page waiting silently
    result.className = "problem"; result.textContent = "the trigger request failed: " + e; return;
  }
  if (!response.ok) { result.className = "problem"; result.textContent = JSON.stringify(body.detail || body);
    return; }
  result.className = "";
  result.innerHTML = "";
  const link = document.createElement("a");
  link.id = "run-link"; link.target = "_top";
  link.href = "../dags/" + encodeURIComponent(dagId) + "/runs/" + encodeURIComponent(body.dag_run_id);
  link.textContent = body.dag_run_id; link.dataset.runId = body.dag_run_id;
  result.append("Triggered ", link, " (" + JSON.stringify(body.conf) + ")");
});
