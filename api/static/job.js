/* Cohort dashboard, one job's page: uPlot charts of loss, accuracy and examples/s
   (each replica of each attempt, plus their mean; by step or by epoch), the live
   status/replicas/events fragment, the log viewer, cancel and resubmit. */
"use strict";

window.jobPage = function jobPage() {
  const jobId = Number(location.pathname.split("/").pop());
  const spec = JSON.parse(document.getElementById("job-spec").textContent);
  const live = document.getElementById("job-live");
  const logs = document.getElementById("logs");
  const follow = document.getElementById("follow");
  const NAMES = ["loss", "accuracy", "examples_per_sec", "epoch_loss", "epoch_accuracy"];
  const HISTORY_POINTS = 5000;  // across every series of the charts
  const COLORS = ["#0b57d0", "#b3261e", "#146c2e", "#8e24aa", "#e37400", "#00796b", "#5d4037", "#3949ab"];
  const points = new Map();  // "attempt|replica|name" -> Map(step -> [epoch, value])
  const charts = {};
  let count = 0, maxStep = 0, streamedLogs = false, terminal = isTerminal();

  function isTerminal() { return live.querySelector(".summary")?.dataset.terminal === "true"; }
  function isSettled() { return live.querySelector(".summary")?.dataset.settled === "true"; }
  function attemptNow() { return Number(live.querySelector(".summary")?.dataset.attempt || 1); }

  function addPoint(p) {
    const key = `${p.attempt}|${p.replica}|${p.name}`;
    if (!points.has(key)) points.set(key, new Map());
    const series = points.get(key);
    if (!series.has(p.step)) count += 1;
    series.set(p.step, [p.epoch, p.value]);
    if (p.attempt === attemptNow()) maxStep = Math.max(maxStep, p.step);
  }

  /* Series for one chart: {label -> Map(x -> y)}, plus attempt start xs. */
  function collect(base, byEpoch) {
    const lines = new Map(), starts = new Map();
    const name = byEpoch && base !== "examples_per_sec" ? `epoch_${base}` : base;
    for (const [key, series] of points) {
      const [attempt, replica, n] = key.split("|");
      if (n !== name) continue;
      const line = new Map(), sums = new Map();
      for (const [step, [epoch, value]] of series) {
        const x = byEpoch ? (epoch ?? 0) + 1 : step;
        if (byEpoch && base === "examples_per_sec") {   // mean of the epoch's steps
          const s = sums.get(x) || [0, 0]; s[0] += value; s[1] += 1; sums.set(x, s);
        } else line.set(x, value);
      }
      for (const [x, [sum, n2]] of sums) line.set(x, sum / n2);
      if (!line.size) continue;
      lines.set(`attempt ${attempt} · replica ${replica}`, line);
      const first = Math.min(...line.keys());
      if (Number(attempt) > 1) starts.set(Number(attempt), Math.min(starts.get(Number(attempt)) ?? first, first));
      // The mean of the replicas of one attempt.
      const mean = lines.get(`mean · attempt ${attempt}`) || new Map();
      for (const [x, y] of line) { const m = mean.get(x) || [0, 0]; m[0] += y; m[1] += 1; mean.set(x, m); }
      lines.set(`mean · attempt ${attempt}`, mean);
    }
    for (const [label, line] of lines) {
      if (label.startsWith("mean")) for (const [x, [s, n]] of line) line.set(x, s / n);
    }
    return { lines, starts };
  }

  function attemptMarkers(starts) {
    return (u) => {
      const ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = "#444b55"; ctx.setLineDash([6, 4]); ctx.lineWidth = 1.5;
      ctx.fillStyle = "#1b1f24"; ctx.font = `${12 * devicePixelRatio}px system-ui`;
      for (const [attempt, x] of starts) {
        const px = Math.round(u.valToPos(x, "x", true));
        ctx.beginPath(); ctx.moveTo(px, u.bbox.top); ctx.lineTo(px, u.bbox.top + u.bbox.height); ctx.stroke();
        ctx.fillText(`attempt ${attempt}`, px + 4, u.bbox.top + 14 * devicePixelRatio);
      }
      ctx.restore();
    };
  }

  function draw() {
    const byEpoch = document.querySelector("input[name=xaxis]:checked")?.value === "epoch";
    for (const [id, base] of [["chart-loss", "loss"], ["chart-accuracy", "accuracy"], ["chart-examples", "examples_per_sec"]]) {
      const el = document.getElementById(id);
      const { lines, starts } = collect(base, byEpoch);
      const labels = [...lines.keys()].sort();
      const xs = [...new Set(labels.flatMap((l) => [...lines.get(l).keys()]))].sort((a, b) => a - b);
      const data = [xs, ...labels.map((l) => xs.map((x) => lines.get(l).get(x) ?? null))];
      const shape = labels.join(";") + (byEpoch ? "|e" : "|s");
      el.dataset.points = String(xs.length);
      const width = Math.max(260, el.clientWidth || 360);
      if (!window.uPlot) { el.textContent = "Charts need the bundled uPlot script."; continue; }
      if (charts[id] && charts[id].shape === shape) {
        charts[id].starts.clear(); starts.forEach((v, k) => charts[id].starts.set(k, v));
        charts[id].plot.setData(data);
        continue;
      }
      if (charts[id]) charts[id].plot.destroy();
      el.textContent = "";
      if (!xs.length) { el.innerHTML = '<p class="muted">No points yet.</p>'; charts[id] = null; continue; }
      const markerStarts = new Map(starts);
      const plot = new uPlot({
        width, height: 240, scales: { x: { time: false } },
        axes: [{ label: byEpoch ? "epoch" : "step" }, { size: 64 }],
        series: [{ label: byEpoch ? "epoch" : "step" }, ...labels.map((label, i) => ({
          label, spanGaps: true, width: label.startsWith("mean") ? 2.5 : 1.25,
          stroke: label.startsWith("mean") ? "#1b1f24" : COLORS[i % COLORS.length],
          dash: label.startsWith("mean") ? [8, 3] : undefined,
        }))],
        hooks: { draw: [attemptMarkers(markerStarts)] },
      }, data, el);
      charts[id] = { plot, shape, starts: markerStarts };
    }
    document.getElementById("points").textContent = `${count} points`;
    showNoMetricsHint();
  }

  /* No points once the job runs: say how its code would report them (a command writes
     TensorBoard scalars or calls cohort.report()), rather than leave the charts empty. */
  function showNoMetricsHint() {
    const hint = document.getElementById("no-metrics");
    const status = live.querySelector(".summary")?.dataset.status;
    const started = terminal || ["running", "restarting"].includes(status);
    hint.hidden = count > 0 || !started;
    hint.textContent = terminal ? hint.dataset.finished : hint.dataset.running;
  }
  const redraw = Cohort.throttle(draw, 300);
  window.addEventListener("resize", Cohort.throttle(() => {
    for (const [id, c] of Object.entries(charts)) if (c) c.plot.setSize({ width: Math.max(260, document.getElementById(id).clientWidth), height: 240 });
  }, 300));
  document.querySelectorAll("input[name=xaxis]").forEach((r) => r.addEventListener("change", draw));

  const NAME_QUERY = NAMES.map((n) => `name=${n}`).join("&");

  /* Points over REST, added to the charts; the answer, or null if there is none. */
  async function loadPoints(query) {
    const response = await Cohort.api(`/api/v1/jobs/${jobId}/metrics?${NAME_QUERY}&${query}`).catch(() => null);
    const answer = response && response.ok ? await response.json().catch(() => null) : null;
    if (!answer) return null;
    for (const p of answer.items) addPoint(p);
    redraw();
    return answer;
  }

  /* The charts' history, downsampled on the server (a long run's million points come
     back as a few thousand bucket means). Returns the id the live stream goes on from. */
  async function loadHistory() {
    const answer = await loadPoints(`max_points=${HISTORY_POINTS}`);
    return answer ? answer.last_id || 0 : null;
  }

  /* Points after the ones shown (polling without a stream). */
  function loadNewPoints() {
    return loadPoints(`limit=100000&attempt=${attemptNow()}&since_step=${maxStep}`);
  }

  function appendLog(text) {
    if (!streamedLogs) { logs.textContent = ""; streamedLogs = true; }
    logs.append(text + "\n");
    if (follow.checked) logs.scrollTop = logs.scrollHeight;
  }

  function showLogTails() {
    // Without a log stream, show the tail each replica's agent kept at its exit.
    if (streamedLogs) return;
    const tails = live.querySelector("#log-tails");
    if (!tails) return;
    const text = [...tails.content.querySelectorAll("pre")]
      .map((pre) => `── replica ${pre.dataset.replica} ──\n${pre.textContent}`).join("\n");
    if (text) { logs.textContent = text; if (follow.checked) logs.scrollTop = logs.scrollHeight; }
  }

  async function loadLogs() {
    // The newest lines over REST, replacing what is shown (a long run's log is not
    // replayed whole); returns the newest line's id, for the stream to go on from.
    const response = await Cohort.api(`/api/v1/jobs/${jobId}/logs?tail=1000`).catch(() => null);
    const answer = response && response.ok ? await response.json().catch(() => null) : null;
    if (!answer) { showLogTails(); return null; }
    const items = Array.isArray(answer) ? answer : answer.items || [];
    if (!items.length) { showLogTails(); return 0; }
    logs.textContent = items.map((l) => `[a${l.attempt} r${l.replica}] ${l.line}`).join("\n") + "\n";
    streamedLogs = true;  // lines from the stream are appended after these
    if (follow.checked) logs.scrollTop = logs.scrollHeight;
    return Math.max(...items.map((l) => l.id));
  }

  async function updateLive() {
    if (await Cohort.refresh(live)) {
      const wasTerminal = terminal;
      terminal = isTerminal();
      document.getElementById("cancel-btn").hidden = terminal;
      if (terminal && !wasTerminal && poll) loadNewPoints();  // the final points
      if (terminal) showLogTails();
      showNoMetricsHint();
    }
  }
  const statusChanged = Cohort.throttle(updateLive, 500);
  const FINAL = ["succeeded", "failed", "cancelled"];

  let poll = null;
  function startPolling() {
    if (poll) return;
    loadNewPoints();
    loadLogs();
    poll = setInterval(async () => {
      await updateLive();
      await loadNewPoints();
      await loadLogs();
      if (isSettled()) { clearInterval(poll); Cohort.say("finished"); }
    }, 2000);
  }

  if (terminal) {
    // Nothing will change: the stored history is all there is.
    loadHistory().then(showNoMetricsHint); loadLogs();
  } else {
    // The charts' history downsampled and the log's tail, then the stream from there
    // on: the points and lines stored since, and the status.
    Promise.all([loadHistory(), loadLogs()]).then(([lastId, lastLogId]) => {
      showNoMetricsHint();
      // Without the history's ids, poll rather than have the stream replay everything.
      if (lastId === null || lastLogId === null) { startPolling(); return; }
      const source = Cohort.stream(`/api/v1/jobs/${jobId}/stream?last_event_id=${lastId}.${lastLogId}.0`, {
        // The terminal status is the stream's last event: close rather than reconnect.
        status: (s) => { statusChanged(); if (FINAL.includes(s.status) && source) source.close(); },
        job: statusChanged,  // its place in the queue or its replicas changed
        metric: (p) => { addPoint(p); redraw(); },
        log: (l) => appendLog(`[a${l.attempt} r${l.replica}] ${l.line}`),
      }, startPolling);
    }, startPolling);
  }
  // Ages and durations move, and replicas stop a little after a cancel: refresh
  // until nothing on the page can change any more.
  (function tick() {
    if (isSettled()) return;
    setTimeout(async () => { if (!poll) await updateLive(); tick(); }, terminal ? 1500 : 5000);
  })();

  const cancel = document.getElementById("cancel-btn");
  const error = document.getElementById("action-error");
  let armed = null;
  cancel.addEventListener("click", async () => {
    // Two clicks, so that a slip of the finger does not stop a day of training.
    if (!armed) {
      cancel.textContent = "Click again to cancel";
      armed = setTimeout(() => { armed = null; cancel.textContent = "Cancel job"; }, 5000);
      return;
    }
    clearTimeout(armed); armed = null; cancel.disabled = true;
    const response = await Cohort.api(`/api/v1/jobs/${jobId}/cancel`, { method: "POST" });
    if (!response.ok) {
      const answer = await response.json().catch(() => ({}));
      error.hidden = false; error.textContent = answer.message || `error ${response.status}`;
    }
    cancel.disabled = false; cancel.textContent = "Cancel job";
    await updateLive();
  });

  document.getElementById("resubmit-btn").addEventListener("click", async () => {
    const response = await Cohort.api("/api/v1/jobs", {
      method: "POST", body: JSON.stringify(spec), headers: { "Content-Type": "application/json" },
    });
    const answer = await response.json().catch(() => ({}));
    if (response.ok) { location.href = `/jobs/${answer.id}`; return; }
    error.hidden = false; error.textContent = answer.message || `error ${response.status}`;
  });
};
