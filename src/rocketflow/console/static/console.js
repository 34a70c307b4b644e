// rocketflow console: the CSRF header on htmx requests, write outcomes shown whatever their status,
// and the lag chart (uPlot) fed from /api/lag. No inline script anywhere (the CSP forbids it).
(function () {
  "use strict";

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  document.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-CSRF-Token"] = csrfToken();
  });

  // a refused or failed write answers 4xx/5xx with a message fragment: show it where the form says
  document.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    if (status >= 400 && event.detail.requestConfig.verb === "post") {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  var palette = ["#1f4e79", "#d9822b", "#2e8540", "#b03a2e", "#6c3483", "#117a8b", "#7d6608", "#515a5a"];

  function LagChart(element) {
    this.element = element;
    this.src = element.getAttribute("data-src");
    this.interval = Math.max(500, parseInt(element.getAttribute("data-interval"), 10) || 5000);
    this.plot = null;
    this.labels = "";
  }

  LagChart.prototype.options = function (labels) {
    var width = Math.max(320, this.element.clientWidth || 800);
    var series = [{}];
    labels.forEach(function (label, index) {
      series.push({
        label: label,
        stroke: palette[index % palette.length],
        width: index === 0 ? 2.5 : 1.5,
        dash: index === 0 ? [8, 4] : undefined,
        spanGaps: true,
        value: function (u, v) { return v == null ? "—" : v.toLocaleString(); }
      });
    });
    return {
      width: width,
      height: 260,
      series: series,
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(10, max * 1.1)]; } } },
      axes: [{}, { label: "messages behind", size: 70 }],
      legend: { live: true }
    };
  };

  LagChart.prototype.render = function (payload) {
    var labels = payload.series.map(function (s) { return s.label; });
    var data = [payload.t].concat(payload.series.map(function (s) { return s.values; }));
    var key = labels.join("\u0000");
    if (this.plot === null || key !== this.labels) {
      if (this.plot !== null) { this.plot.destroy(); }
      this.element.innerHTML = "";
      this.plot = new uPlot(this.options(labels), data, this.element);
      this.labels = key;
    } else {
      this.plot.setData(data);
    }
    var times = payload.t;
    this.element.setAttribute("data-points", String(times.length));
    this.element.setAttribute("data-last-time", times.length ? String(times[times.length - 1]) : "");
    var totals = payload.series.length ? payload.series[0].values : [];
    this.element.setAttribute("data-last-total", totals.length ? String(totals[totals.length - 1]) : "");
  };

  LagChart.prototype.poll = function () {
    var chart = this;
    fetch(chart.src, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) { throw new Error("lag request answered " + response.status); }
        return response.json();
      })
      .then(function (payload) { chart.render(payload); chart.element.removeAttribute("data-error"); })
      .catch(function (error) { chart.element.setAttribute("data-error", String(error.message || error)); })
      .then(function () { window.setTimeout(function () { chart.poll(); }, chart.interval); });
  };

  function start() {
    document.querySelectorAll(".chart[data-src]").forEach(function (element) {
      new LagChart(element).poll();
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
