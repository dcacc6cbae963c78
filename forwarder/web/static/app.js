// forwarder pages: progressive enhancement only. Every page reads fine without this file.
"use strict";

// Charts: an element with data-chart="<id>" is drawn from the JSON in <script id="<id>">:
// {"x": [unix seconds...], "series": [{"name": label, "values": [...]}, ...]} (uPlot's columns).
const PALETTE = ["#0b57b8", "#a4161a", "#1a6b2f", "#8a5300", "#6f42c1", "#0f766e", "#b42d8c", "#4a5361",
                 "#c2410c", "#1e40af", "#15803d", "#854d0e", "#334155"];

function drawChart(el) {
  const source = document.getElementById(el.dataset.chart);
  if (!source || typeof uPlot === "undefined") return;
  const data = JSON.parse(source.textContent);
  if (!data.series.length) return;
  const label = el.dataset.label || "lines";
  const opts = {
    width: Math.max(280, el.clientWidth),
    height: 240,
    series: [{}].concat(data.series.map((s, i) => ({
      label: s.name, stroke: PALETTE[i % PALETTE.length], width: 2,
      value: (u, v) => (v == null ? "-" : v.toLocaleString() + " " + label),
    }))),
    axes: [{}, {size: 60}],
    scales: {x: {time: true}},
    // The pages give every time in UTC (as the log lines do); the chart's axis too.
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
  };
  const plot = new uPlot(opts, [data.x].concat(data.series.map((s) => s.values)), el);
  new ResizeObserver(() => plot.setSize({width: Math.max(280, el.clientWidth), height: 240})).observe(el);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-chart]").forEach(drawChart);
});
