// alloctrack web view: refreshes the live part of a page in place, sorts
// and filters tables without a reload, draws the rate chart and the flame
// graph. The pages work without it, except the chart and the flame graph.
(function () {
  "use strict";

  function liveURL() {
    var u = new URL(window.location.href);
    u.searchParams.set("fragment", "1");
    return u.toString();
  }

  var refreshing = false;
  function refresh() {
    var live = document.getElementById("live");
    if (!live || refreshing) return;
    refreshing = true;
    fetch(liveURL(), { headers: { "Accept": "text/html" } }).then(function (r) {
      if (!r.ok) throw new Error("refresh: HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      var open = {};
      live.querySelectorAll("details[open]").forEach(function (d) {
        var id = d.closest("tr") && d.closest("tr").querySelector("a.id");
        if (id) open[id.textContent] = true;
      });
      live.innerHTML = html;
      live.querySelectorAll("tr").forEach(function (tr) {
        var id = tr.querySelector("a.id");
        var d = tr.querySelector("details");
        if (id && d && open[id.textContent]) d.open = true;
      });
      document.body.dataset.refreshed = String(Date.now());
      drawChart();
    }).catch(function (e) {
      var live2 = document.getElementById("live");
      if (live2) live2.dataset.error = String(e.message || e);
    }).finally(function () { refreshing = false; });
  }

  function setParam(k, v) {
    var u = new URL(window.location.href);
    if (v) u.searchParams.set(k, v); else u.searchParams.delete(k);
    window.history.replaceState(null, "", u.toString());
  }

  document.addEventListener("click", function (ev) {
    var a = ev.target.closest && ev.target.closest("a[data-sort]");
    if (!a) return;
    ev.preventDefault();
    setParam("sort", a.dataset.sort);
    var hidden = document.querySelector("form.filter input[name=sort]");
    if (hidden) hidden.value = a.dataset.sort;
    refresh();
  });

  var filterTimer = null;
  document.addEventListener("input", function (ev) {
    if (ev.target.id !== "filter") return;
    clearTimeout(filterTimer);
    filterTimer = setTimeout(function () {
      setParam("q", ev.target.value.trim());
      refresh();
    }, 200);
  });

  // niceMax rounds a maximum up to 1, 2 or 5 times a power of ten, so the
  // axis reads as a round number.
  function niceMax(v) {
    if (v <= 0) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  function fmtUnit(v, unit) {
    if (unit === "bytes/s") {
      var units = ["B/s", "KiB/s", "MiB/s", "GiB/s"], k = 0;
      while (v >= 1024 && k < units.length - 1) { v /= 1024; k++; }
      return (v >= 10 || k === 0 ? Math.round(v) : v.toFixed(1)) + " " + units[k];
    }
    if (v >= 1e6) return (v / 1e6).toFixed(v >= 1e7 ? 0 : 1) + "M/s";
    if (v >= 1e3) return (v / 1e3).toFixed(v >= 1e4 ? 0 : 1) + "k/s";
    return Math.round(v) + "/s";
  }

  // drawChart draws each chart of the app page: one quantity per chart,
  // bars per window, with a y axis from 0 to a round maximum in the
  // quantity's unit and an x axis of windows, oldest left. What it drew is
  // noted in the canvas's data-axes (read by the browser test).
  function drawChart() {
    var fig = document.querySelector("figure.chart");
    if (!fig) return;
    var ws = JSON.parse(fig.dataset.windows || "null") || [];
    var approx = fig.dataset.estimated ? "≈" : "";
    fig.querySelectorAll("canvas.chart").forEach(function (c) {
      if (!c.getContext) return;
      var ctx = c.getContext("2d");
      var w = c.width, h = c.height, left = 72, bottom = 18, top = 8;
      var field = c.dataset.field, unit = c.dataset.unit;
      ctx.clearRect(0, 0, w, h);
      ctx.font = "12px sans-serif";
      if (!ws.length) {
        ctx.fillStyle = "#666";
        ctx.fillText("No window counted yet.", 10, h / 2);
        c.dataset.axes = "";
        return;
      }
      var max = 0;
      ws.forEach(function (p) { max = Math.max(max, p[field]); });
      var scale = 1;
      if (unit === "bytes/s") {
        while (max / scale >= 1024 && scale < Math.pow(1024, 3)) scale *= 1024;
      }
      var ymax = niceMax(max / scale) * scale, plotH = h - bottom - top, plotW = w - left - 4;
      // Axes and grid: 0, half and the maximum.
      ctx.strokeStyle = "#ccc";
      ctx.fillStyle = "#444";
      ctx.lineWidth = 1;
      [0, 0.5, 1].forEach(function (f) {
        var y = Math.round(top + plotH * (1 - f)) + 0.5;
        ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(w - 4, y); ctx.stroke();
        var label = approx + fmtUnit(ymax * f, unit);
        ctx.fillText(label, left - 6 - ctx.measureText(label).width, y + 4);
      });
      ctx.strokeStyle = "#888";
      ctx.beginPath(); ctx.moveTo(left + 0.5, top); ctx.lineTo(left + 0.5, top + plotH); ctx.stroke();
      var bw = plotW / ws.length;
      ctx.fillStyle = field === "bytes_per_second" ? "#d9822b" : "#4a7fc1";
      ws.forEach(function (p, i) {
        var bh = plotH * p[field] / ymax;
        ctx.fillRect(left + 1 + i * bw + 1, top + plotH - bh, Math.max(bw - 2, 1), bh);
      });
      ctx.fillStyle = "#444";
      var xl = ws.length + " windows, oldest left";
      ctx.fillText(xl, left + plotW - ctx.measureText(xl).width, h - 4);
      ctx.fillText(unit, left + 4, h - 4);
      c.dataset.axes = "y 0.." + fmtUnit(ymax, unit) + "; x " + ws.length + " windows";
    });
  }

  // Flame graph: an icicle of absolutely positioned divs, outermost frame
  // on top; names are set with textContent, never parsed as HTML.
  function flame() {
    var box = document.getElementById("flame");
    if (!box) return;
    var info = document.getElementById("flame-info");
    var unit = box.dataset.unit;
    fetch(box.dataset.src).then(function (r) {
      if (!r.ok) throw new Error("flame graph: HTTP " + r.status);
      return r.json();
    }).then(function (root) {
      var rowH = 18;
      function depth(n) { var d = 0; (n.c || []).forEach(function (c) { d = Math.max(d, depth(c)); }); return d + 1; }
      function render(focus) {
        box.textContent = "";
        box.style.height = (depth(focus) * rowH + 2) + "px";
        var total = focus.v || 1;
        function place(n, x, y, w) {
          if (w < 0.0015) return;
          var d = document.createElement("div");
          d.className = "fr" + (n.n.indexOf("new ") === 0 ? " leaf" : "");
          d.style.left = (x * 100) + "%";
          d.style.width = (w * 100) + "%";
          d.style.top = (y * rowH) + "px";
          d.textContent = n.n;
          var pct = (100 * n.v / (root.v || 1)).toFixed(1);
          d.title = n.n + "\n" + n.v.toLocaleString() + " " + unit + " (" + pct + "% of all)";
          d.addEventListener("click", function () { render(n === focus ? root : n); });
          d.addEventListener("mouseenter", function () { if (info) info.textContent = d.title.replace("\n", " — "); });
          box.appendChild(d);
          var cx = x;
          (n.c || []).forEach(function (c) {
            var cw = w * c.v / (n.v || 1);
            place(c, cx, y + 1, cw);
            cx += cw;
          });
        }
        place(focus, 0, 0, 1);
        box.dataset.nodes = String(box.childElementCount);
        if (info) info.textContent = root.v ? "" : "Nothing counted yet in this span.";
        void total;
      }
      render(root);
    }).catch(function (e) {
      box.textContent = String(e.message || e);
    });
  }

  // The heap dump button: a POST with the header the server asks for, then
  // the dump's answers and links to its files.
  function heapDump() {
    var form = document.getElementById("heapdump");
    if (!form) return;
    var out = form.querySelector("output");
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var button = form.querySelector("button");
      button.disabled = true;
      out.textContent = "Dumping…";
      var url = form.dataset.url + (form.elements.gc.checked ? "?gc=1" : "");
      fetch(url, { method: "POST", headers: { "X-Alloctrack-Request": "heapdump" } }).then(function (r) {
        if (!r.ok) return r.text().then(function (t) { throw new Error(t.trim() || "HTTP " + r.status); });
        return r.json();
      }).then(function (res) {
        var s = res.summary || {};
        out.textContent = "Dump " + res.id + ": " + (s.objects || 0) + " objects in " + (s.dump_seconds || 0).toFixed(1) + " s, " +
          (s.leaks || []).length + " leaked Activities and Fragments, " + (s.duplicate_strings || []).length + " groups of duplicate Strings, " +
          (s.duplicate_bitmaps || []).length + " of Bitmaps. ";
        var page = document.createElement("a");
        page.href = res.page;
        page.textContent = "the dump's page";
        out.appendChild(page);
        out.appendChild(document.createTextNode(" "));
        Object.keys(res.files).forEach(function (name) {
          var a = document.createElement("a");
          a.href = res.files[name];
          a.textContent = name;
          a.setAttribute("download", "");
          out.appendChild(a);
          out.appendChild(document.createTextNode(" "));
        });
      }).catch(function (e) {
        out.textContent = "Heap dump failed: " + String(e.message || e);
      }).finally(function () {
        button.disabled = false;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawChart();
    flame();
    heapDump();
    var live = document.getElementById("live");
    if (live) {
      var every = parseInt(live.dataset.refresh, 10) || 5000;
      setInterval(refresh, every);
    }
  });
})();
