/* Cohort dashboard, one sweep's page: every trial's objective curve on one uPlot chart
   (the best trial's line thick), the live summary/best/trials fragment refreshed while
   the sweep runs, and cancel. The curves come in the fragment as JSON. */
"use strict";

window.sweepPage = function sweepPage() {
  const live = document.getElementById("sweep-live");
  const el = document.getElementById("chart-objective");
  const cancel = document.getElementById("cancel-btn");
  const COLORS = ["#0b57d0", "#b3261e", "#146c2e", "#8e24aa", "#e37400", "#00796b", "#5d4037", "#3949ab"];
  let plot = null, shape = "";

  function isTerminal() { return live.querySelector(".summary")?.dataset.terminal === "true"; }

  function draw() {
    const curves = JSON.parse(live.querySelector("#sweep-curves")?.textContent || "[]");
    const xs = [...new Set(curves.flatMap((c) => c.points.map(([step]) => step)))].sort((a, b) => a - b);
    const data = [xs, ...curves.map((c) => {
      const byStep = new Map(c.points);
      return xs.map((x) => byStep.get(x) ?? null);
    })];
    const next = curves.map((c) => `${c.job_id}${c.best ? "*" : ""}`).join(";");
    el.dataset.curves = String(curves.length);
    if (!window.uPlot) { el.textContent = "Charts need the bundled uPlot script."; return; }
    if (plot && shape === next) { plot.setData(data); return; }
    if (plot) { plot.destroy(); plot = null; }
    shape = next;
    el.textContent = "";
    if (!xs.length) { el.innerHTML = '<p class="muted">No points yet.</p>'; return; }
    plot = new uPlot({
      width: Math.max(300, el.clientWidth || 720), height: 300, scales: { x: { time: false } },
      axes: [{ label: "step" }, { size: 64 }],
      series: [{ label: "step" }, ...curves.map((c, i) => ({
        label: c.label + (c.best ? " (best)" : ""), spanGaps: true,
        width: c.best ? 3 : 1.25, stroke: c.best ? "#1b1f24" : COLORS[i % COLORS.length],
      }))],
    }, data, el);
  }

  window.addEventListener("resize", Cohort.throttle(() => {
    if (plot) plot.setSize({ width: Math.max(300, el.clientWidth), height: 300 });
  }, 300));

  const error = document.getElementById("action-error");
  let armed = null;
  cancel.addEventListener("click", async () => {
    // Two clicks, as on a job's page: a slip of the finger must not stop every trial.
    if (!armed) {
      cancel.textContent = "Click again to cancel";
      armed = setTimeout(() => { armed = null; cancel.textContent = "Cancel sweep"; }, 5000);
      return;
    }
    clearTimeout(armed); armed = null; cancel.disabled = true;
    const response = await Cohort.api(`/api/v1/sweeps/${cancel.dataset.sweepId}/cancel`, { method: "POST" });
    if (!response.ok) {
      const answer = await response.json().catch(() => ({}));
      error.hidden = false; error.textContent = answer.message || `error ${response.status}`;
    }
    cancel.disabled = false; cancel.textContent = "Cancel sweep";
    await update();
  });

  async function update() {
    if (await Cohort.refresh(live)) {
      draw();
      cancel.hidden = isTerminal();
    }
  }

  draw();
  if (!isTerminal()) {
    // Trials are jobs: the project's stream says when one changes; the poll covers
    // points (objective values, curves) arriving without a status change.
    const changed = Cohort.throttle(update, 1000);
    const source = Cohort.stream("/api/v1/stream", { status: changed }, () => Cohort.say("polling"));
    const poll = setInterval(async () => {
      await update();
      if (isTerminal()) { clearInterval(poll); if (source) source.close(); Cohort.say("finished"); }
    }, 3000);
  }
};
