// servekit console: polls the page's JSON and swaps in the server-rendered fragments; draws uPlot charts.
// No framework, no build step; state lives in window.servekitConsole so tests (and curious users) can read it.
(function () {
  "use strict";
  var POLL_MS = 2000;
  var state = (window.servekitConsole = { charts: {}, updates: 0, errors: 0, last: null });
  var COLORS = ["#0b5cad", "#c0392b", "#1e8449", "#8e44ad", "#b9770e", "#117a8b", "#555555", "#d35400", "#2c3e50"];

  function swap(html) {
    Object.keys(html || {}).forEach(function (key) {
      var el = document.querySelector('[data-live="' + key + '"]');
      // a form being filled in is not replaced under the user's fingers
      if (!el || el.contains(document.activeElement)) return;
      el.innerHTML = html[key];
    });
  }

  function summary(chart) {
    var parts = [];
    for (var i = 1; i < chart.data.length; i++) {
      var col = chart.data[i], last = null;
      for (var j = col.length - 1; j >= 0; j--) if (col[j] !== null) { last = col[j]; break; }
      parts.push(chart.labels[i - 1] + " " + (last === null ? "no data" : last + " " + chart.unit));
    }
    return chart.title + ", latest: " + parts.join("; ");
  }

  // scaling activities (or any chart's marks) as dashed vertical lines; the table beside the chart lists them as text
  function marksPlugin(key) {
    return { hooks: { draw: [function (u) {
      var entry = state.charts[key];
      var marks = (entry && entry.marks) || [];
      var ctx = u.ctx, top = u.bbox.top, bottom = u.bbox.top + u.bbox.height;
      ctx.save();
      ctx.setLineDash([6, 4]);
      ctx.lineWidth = 2;
      marks.forEach(function (m) {
        var x = u.valToPos(m.t, "x", true);
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
        ctx.strokeStyle = m.status === "Failed" ? "#c0392b" : "#b9770e";
        ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, bottom); ctx.stroke();
      });
      ctx.restore();
    }] } };
  }

  function draw(container, charts) {
    charts.forEach(function (chart) {
      var box = document.getElementById("chart-" + chart.key);
      var entry = state.charts[chart.key];
      if (!box) {
        box = document.createElement("figure");
        box.className = "chart";
        box.id = "chart-" + chart.key;
        box.setAttribute("role", "img");
        var h = document.createElement("h3");
        h.textContent = chart.title + " (" + chart.unit + ")";
        box.appendChild(h);
        container.appendChild(box);
      }
      var marks = chart.marks || [];
      var marked = chart.unit === "instances" ? marks.length + " scaling activities marked"
        : "marked " + marks.map(function (m) { return m.label; }).join(", ");
      box.setAttribute("aria-label", summary(chart) + (marks.length ? "; " + marked : ""));
      var sig = chart.labels.join("|");
      if (entry && entry.sig === sig) {
        entry.marks = marks;
        entry.plot.setData(chart.data);
        entry.data = chart.data;
        return;
      }
      if (entry) entry.plot.destroy();
      var series = [{}].concat(chart.labels.map(function (label, i) {
        // latencies exist only in periods with traffic: dots keep a lone period visible between gaps
        var s = { label: label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false };
        if (chart.unit === "ms") s.points = { show: true, size: 4, fill: COLORS[i % COLORS.length] };
        // one point per monitoring execution: dots, and the second series dashed (colour is not the only cue)
        if (chart.unit === "score" || chart.unit === "error") {
          s.points = { show: true, size: 7, fill: COLORS[i % COLORS.length] };
          if (i === 1) s.dash = [8, 4];
        }
        // a training job's metric, a tuning job's objective: few points, each one shown
        if (chart.unit === "value" || chart.unit === "objective") s.points = { show: true, size: 7, fill: COLORS[i % COLORS.length] };
        // desired dashed, so where it equals current both stay visible (and colour is not the only cue)
        if (chart.unit === "instances" && i === 0) { s.dash = [8, 4]; s.width = 3; }
        return s;
      }));
      var width = Math.max(300, box.clientWidth - 16);
      var opts = {
        width: width, height: 220, series: series,
        // the axis in UTC, as every time on the console's pages
        tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
        axes: [{}, { label: chart.unit, size: 60 }],
        scales: { y: { range: function (u, min, max) {
          if (chart.unit === "instances") return [0, Math.max(max || 0, 1) + 1];
          if (chart.unit === "score") return [0, 1];
          // a metric may be negative or far from 0 (a loss, a log-likelihood): its own span, padded
          if (chart.unit === "value" || chart.unit === "objective") {
            var pad = Math.max(Math.abs(max - min) * 0.1, Math.abs(max || 1) * 0.05);
            return [min - pad, max + pad];
          }
          return [0, Math.max(max || 0, chart.unit === "ms" ? 1 : 0.1) * 1.1];
        } } },
        plugins: [marksPlugin(chart.key)],
      };
      if (chart.unit === "value" || chart.unit === "objective") {
        // a job's points (one, or a few seconds apart) get some room around them: uPlot widens a lone point's
        // time axis by 86400 of its units, which for timestamps in seconds is years
        opts.scales.x = { time: true, range: function (u, min, max) {
          var xs = u.data[0] || [];
          if (xs.length) { min = xs[0]; max = xs[xs.length - 1]; }
          var margin = Math.max((max - min) * 0.05, min === max ? 60 : 1);
          return [min - margin, max + margin];
        } };
      }
      state.charts[chart.key] = { sig: sig, data: chart.data, marks: marks };
      state.charts[chart.key].plot = new uPlot(opts, chart.data, box);
    });
  }

  function poll(src, apply) {
    var busy = false;
    function tick() {
      if (busy) return;
      busy = true;
      fetch(src(), { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
        .then(function (payload) { apply(payload); state.updates++; state.last = payload; })
        .catch(function () { state.errors++; })
        .then(function () { busy = false; });
    }
    tick();
    setInterval(tick, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    // charts whose data the server put in the page (model quality per monitoring execution)
    Array.prototype.forEach.call(document.querySelectorAll("[data-charts]"), function (el) {
      draw(el, JSON.parse(el.getAttribute("data-charts")));
    });
    // list and job pages: a section naming its JSON, whose fragments replace its parts (and whose charts, on a
    // training or tuning job's page, redraw the page's own)
    var list = document.querySelector("section[data-live][data-src]");
    var own = document.querySelector("#charts[data-charts]");
    if (list) poll(function () { return list.getAttribute("data-src"); }, function (p) {
      swap(p.html);
      if (own && p.charts) draw(own, p.charts);
    });
    var detail = document.querySelector("[data-endpoint][data-src]");
    if (detail) {
      var select = document.getElementById("range");
      var charts = document.getElementById("charts");
      var scaling = document.getElementById("scaling-charts");
      var updated = document.querySelector('[data-field="updated"]');
      var src = function () { return detail.getAttribute("data-src") + "?range=" + encodeURIComponent(select.value); };
      poll(src, function (p) {
        swap(p.html);
        draw(charts, p.charts);
        if (scaling) draw(scaling, p.scaling_charts || []);
        if (updated) updated.textContent = "updated " + new Date(p.now * 1000).toISOString().slice(11, 19) + " UTC, period " + p.period + " s";
      });
      select.addEventListener("change", function () {
        fetch(src()).then(function (r) { return r.json(); }).then(function (p) {
          draw(charts, p.charts);
          if (scaling) draw(scaling, p.scaling_charts || []);
          state.last = p;
        });
      });
    }
  });
})();
