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

  function drawChart() {
    var c = document.getElementById("chart");
    if (!c || !c.getContext) return;
    var ws = JSON.parse(c.dataset.windows || "null") || [];
    var ctx = c.getContext("2d");
    var w = c.width, h = c.height, pad = 4;
    ctx.clearRect(0, 0, w, h);
    if (!ws.length) {
      ctx.fillStyle = "#666";
      ctx.font = "14px sans-serif";
      ctx.fillText("No window counted yet.", 10, h / 2);
      return;
    }
    var maxA = 0, maxB = 0;
    ws.forEach(function (p) { maxA = Math.max(maxA, p.allocations_per_second); maxB = Math.max(maxB, p.bytes_per_second); });
    var bw = (w - 2 * pad) / ws.length;
    ctx.fillStyle = "#4a7fc1";
    ws.forEach(function (p, i) {
      var bh = maxA ? (h - 20) * p.allocations_per_second / maxA : 0;
      ctx.fillRect(pad + i * bw + 1, h - bh, Math.max(bw - 2, 1), bh);
    });
    ctx.strokeStyle = "#d9822b";
    ctx.lineWidth = 2;
    ctx.beginPath();
    ws.forEach(function (p, i) {
      var y = h - (maxB ? (h - 20) * p.bytes_per_second / maxB : 0);
      var x = pad + i * bw + bw / 2;
      if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = "#222";
    ctx.font = "12px sans-serif";
    ctx.fillText("max " + Math.round(maxA) + " allocations/s, " + Math.round(maxB / 1024) + " KiB/s", pad + 2, 12);
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

  document.addEventListener("DOMContentLoaded", function () {
    drawChart();
    flame();
    var live = document.getElementById("live");
    if (live) {
      var every = parseInt(live.dataset.refresh, 10) || 5000;
      setInterval(refresh, every);
    }
  });
})();
