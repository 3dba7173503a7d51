/* Cohort dashboard: live updates, the submit form, the cluster and schedules pages.
   Live data comes from the SSE streams (/api/v1/stream, /api/v1/jobs/{id}/stream);
   where a stream is missing or drops for good, the page polls the REST API instead.
   Every request carries the HttpOnly login cookie; no token is visible to scripts. */
"use strict";

const Cohort = (() => {
  const state = document.getElementById("live-state");
  const say = (text) => { if (state) state.textContent = text; };

  async function api(path, options = {}) {
    const response = await fetch(path, {
      credentials: "same-origin", ...options,
      headers: { Accept: "application/json", ...(options.headers || {}) },
    });
    if (response.status === 401) { location.href = "/login?next=" + encodeURIComponent(location.pathname); }
    return response;
  }

  /* Replace el's content with the fragment at el.dataset.src (or `select` out of a page). */
  async function refresh(el, select) {
    const response = await fetch(el.dataset.src, { credentials: "same-origin" });
    if (response.status === 401) { location.href = "/login"; return false; }
    if (!response.ok) return false;
    const html = await response.text();
    if (select) {
      const doc = new DOMParser().parseFromString(html, "text/html");
      const part = doc.querySelector(select);
      if (part) el.innerHTML = part.innerHTML;
    } else {
      el.innerHTML = html;
    }
    return true;
  }

  /* Run fn at most once per `ms`, the last call winning. */
  function throttle(fn, ms) {
    let timer = null, again = false;
    return function run() {
      if (timer) { again = true; return; }
      fn();
      timer = setTimeout(() => { timer = null; if (again) { again = false; run(); } }, ms);
    };
  }

  /* Subscribe to an SSE stream; call onFallback once if it cannot be (or stay) open. */
  function stream(url, handlers, onFallback) {
    if (!("EventSource" in window)) { onFallback(); return null; }
    const source = new EventSource(url, { withCredentials: true });
    let fellBack = false;
    for (const [name, handler] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => {
        let data = null;
        try { data = JSON.parse(event.data); } catch (_) { return; }
        handler(data);
      });
    }
    source.onopen = () => say("live");
    source.onerror = () => {
      // CONNECTING: the browser reconnects by itself (sending Last-Event-ID).
      if (source.readyState === EventSource.CLOSED && !fellBack) {
        fellBack = true; source.close(); say("polling"); onFallback();
      }
    };
    return source;
  }

  return { api, refresh, throttle, stream, say };
})();

/* ---------------------------------------------------------------- jobs page */
function jobsPage() {
  const live = document.getElementById("jobs-live");
  const update = Cohort.throttle(() => Cohort.refresh(live), 1000);
  let polling = null;
  Cohort.stream("/api/v1/stream", { status: update }, () => {
    polling = setInterval(update, 2000);
  });
  // Ages, durations and last losses move without status events.
  setInterval(() => { if (!polling) update(); }, 5000);
  submitForm(document.getElementById("submit-form"));
}

function numberOrRaw(text) {
  const value = Number(text);
  return text !== "" && Number.isFinite(value) ? value : text;
}

function clearErrors(form) {
  form.querySelectorAll(".field-error").forEach((el) => el.remove());
  form.querySelectorAll("[aria-invalid]").forEach((el) => {
    el.removeAttribute("aria-invalid"); el.removeAttribute("aria-describedby");
  });
  const general = form.querySelector("#form-error");
  general.hidden = true; general.textContent = "";
}

/* Put `message` right under the input named `field` (or the nearest parent field). */
function showFieldError(form, field, message) {
  let name = field, input = null;
  while (name && !(input = form.elements.namedItem(name))) {
    name = name.includes(".") ? name.slice(0, name.lastIndexOf(".")) : "";
  }
  if (!input || !input.id) {
    const general = form.querySelector("#form-error");
    general.hidden = false;
    general.textContent += (general.textContent ? " " : "") + `${field}: ${message}`;
    return null;
  }
  const note = document.createElement("p");
  note.className = "field-error"; note.id = `${input.id}-error`;
  note.textContent = (name === field ? "" : `${field}: `) + message;
  const existing = document.getElementById(note.id);
  if (existing) { existing.textContent += " " + note.textContent; return input; }
  input.insertAdjacentElement("afterend", note);
  input.setAttribute("aria-invalid", "true");
  input.setAttribute("aria-describedby", note.id);
  return input;
}

/* Split a command line into argv the way a POSIX shell splits words (like Python's
   shlex.split): whitespace separates, '…' is literal, "…" keeps \" \\ \$ \`, and a
   backslash outside quotes escapes the next character. Nothing is expanded or run. */
function splitArgv(line) {
  const argv = [];
  let word = null, quote = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote === "'") {
      if (c === "'") quote = null; else word += c;
    } else if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === "\\" && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) word += line[++i];
      else word += c;
    } else if (/\s/.test(c)) {
      if (word !== null) { argv.push(word); word = null; }
    } else {
      word = word ?? "";
      if (c === "'" || c === '"') quote = c;
      else if (c === "\\") { if (i + 1 < line.length) word += line[++i]; }
      else word += c;
    }
  }
  if (quote) throw new Error(`no closing ${quote}`);
  if (word !== null) argv.push(word);
  return argv;
}

function formPayload(form) {
  const body = { hyperparameters: {} }, errors = [];
  for (const input of form.querySelectorAll("input[name], select[name], textarea[name]")) {
    const text = input.value.trim();
    if (input.hasAttribute("data-optional") && text === "") continue;
    if (input.hasAttribute("data-argv")) {
      try { body[input.name] = splitArgv(text); }
      catch (error) { errors.push([input.name, `${error.message}: close the quote`]); }
    } else if (input.name === "hyperparameters") {
      if (!text) continue;
      try {
        const extra = JSON.parse(text);
        if (typeof extra !== "object" || extra === null || Array.isArray(extra)) throw new Error("not an object");
        Object.assign(body.hyperparameters, extra);
      } catch (_) {
        errors.push(["hyperparameters", 'give a JSON object such as {"hidden_units": 64}']);
      }
    } else if (input.name.startsWith("hyperparameters.")) {
      if (text !== "") body.hyperparameters[input.name.slice(16)] = numberOrRaw(text);
    } else if (input.type === "number") {
      if (text !== "") body[input.name] = numberOrRaw(text);
    } else {
      body[input.name] = input.value;
    }
  }
  // A command runs instead of the trainer: the untouched default trainer is not sent
  // with it (a trainer the user typed is, and the API says to pick one).
  const trainer = form.elements.namedItem("trainer");
  if (body.command && trainer && body.trainer === trainer.dataset.default) delete body.trainer;
  return { body, errors };
}

function submitForm(form) {
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    const { body, errors } = formPayload(form);
    if (errors.length) { errors.forEach(([f, m]) => showFieldError(form, f, m)); return; }
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const key = (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2));
      const response = await Cohort.api("/api/v1/jobs", {
        method: "POST", body: JSON.stringify(body),
        headers: { "Content-Type": "application/json", "Idempotency-Key": key },
      });
      const answer = await response.json().catch(() => ({}));
      if (response.ok) { location.href = `/jobs/${answer.id}`; return; }
      const fields = answer.fields || [];
      let first = null;
      for (const { field, message } of fields) first = showFieldError(form, field, message) || first;
      if (!fields.length) showFieldError(form, "", answer.message || `error ${response.status}`);
      (first || form.querySelector("#form-error")).focus?.();
    } catch (error) {
      showFieldError(form, "", `could not reach the server (${error.message}); try again`);
    } finally {
      button.disabled = false;
    }
  });
}

/* ------------------------------------------------------------- cluster page */
function clusterPage() {
  const live = document.getElementById("cluster-live");
  const update = Cohort.throttle(() => Cohort.refresh(live, "#cluster-live"), 1000);
  Cohort.stream("/api/v1/stream", { status: update }, () => Cohort.say("polling"));
  setInterval(update, 3000);  // heartbeats are not stream events
}

/* ----------------------------------------------------------- schedules page */
function text(tag, value, className) {
  const el = document.createElement(tag);
  el.textContent = value === null || value === undefined || value === "" ? "—" : String(value);
  if (className) el.className = className;
  return el;
}

function when(iso) { return iso ? new Date(iso).toLocaleString() : null; }

function jobLink(id) {
  if (id === null || id === undefined) return text("span", null);
  const a = document.createElement("a");
  a.href = `/jobs/${Number(id)}`; a.textContent = `#${Number(id)}`;
  return a;
}

function tableOf(headers, rows) {
  const table = document.createElement("table");
  const head = table.createTHead().insertRow();
  for (const h of headers) { const th = text("th", h); th.scope = "col"; head.append(th); }
  const body = table.createTBody();
  for (const cells of rows) {
    const tr = body.insertRow();
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.dataset.label = headers[i];
      td.append(c instanceof Node ? c : text("span", c));
      tr.append(td);
    });
  }
  const wrap = document.createElement("div");
  wrap.className = "scroll"; wrap.append(table);
  return wrap;
}

/* A run's evaluations: each model (its job) judged on the holdout's digest, by a job. */
function evaluationsOf(evaluations) {
  if (!evaluations.length) return text("span", null);
  const list = document.createElement("ul");
  list.className = "evaluations";
  for (const e of evaluations) {
    const item = document.createElement("li");
    const value = e.value === null || e.value === undefined ? e.status : `${e.metric}=${e.value.toPrecision(4)}`;
    item.append("model ", jobLink(e.model_job_id), ` ${value} on ${e.holdout_path} ` +
      `(${e.holdout_digest.slice(0, 15)}…) by `, jobLink(e.job_id));
    if (e.reason) item.append(text("span", ` ${e.reason}`, "muted"));
    list.append(item);
  }
  return list;
}

/* When a schedule runs: its cron or interval, and its data trigger. */
function runsWhen(s) {
  const parts = [];
  if (s.cron) parts.push(`cron ${s.cron} (${s.timezone || "UTC"})`);
  else if (s.interval_seconds) parts.push(`every ${s.interval_seconds}s`);
  if (s.trigger) parts.push(`on new ${s.trigger.data} (settled ${s.trigger.settle_seconds}s)`);
  return parts.join(" and ");
}

async function schedulesPage() {
  const box = document.getElementById("schedules");
  const response = await Cohort.api("/api/v1/schedules");
  box.removeAttribute("aria-busy");
  if (response.status === 404 || response.status === 405) {
    box.innerHTML = '<p class="card">Retraining schedules are not available on this server ' +
      "(<code>/api/v1/schedules</code> does not exist).</p>";
    return;
  }
  if (!response.ok) { box.textContent = `Could not load schedules (error ${response.status}).`; return; }
  const answer = await response.json();
  const items = Array.isArray(answer) ? answer : (answer.items || []);
  box.textContent = "";
  if (!items.length) {
    box.innerHTML = '<p class="card">No schedules yet. Create one with ' +
      "<code>POST /api/v1/schedules</code>.</p>";
    return;
  }
  box.append(tableOf(
    ["Schedule", "Runs", "State", "Next run", "Last run", "Last outcome", "Data version handled",
      "Promoted job"],
    items.map((s) => [`#${s.id} ${s.name}`, runsWhen(s),
      s.paused ? "paused" : "active", when(s.next_fire_at), when(s.last_fired_at),
      s.last_outcome, s.trigger ? (s.data_version || "none yet") : null,
      jobLink(s.promoted_job_id)])));
  for (const s of items) {
    const section = document.createElement("section");
    section.append(text("h2", `History of ${s.name}`));
    const runs = s.recent_runs || [];
    section.append(runs.length ? tableOf(
      ["Scheduled for", "Data version", "Job", "Outcome", "Reason", "Decision", "Evaluations"],
      runs.map((r) => [when(r.scheduled_for), r.data_version, jobLink(r.job_id), r.outcome,
        r.reason,
        r.decision ? `${r.decision}${r.decision_reason ? ": " + r.decision_reason : ""}` : null,
        evaluationsOf(r.evaluations || [])]))
      : text("p", "Not run yet.", "muted"));
    box.append(section);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "jobs") jobsPage();
  else if (page === "cluster") clusterPage();
  else if (page === "schedules") schedulesPage();
  else if (page === "job" && window.jobPage) window.jobPage();
  else if (page === "sweep" && window.sweepPage) window.sweepPage();
});
