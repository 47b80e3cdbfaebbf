(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var W = 640, H = 340, M = {l: 64, r: 14, t: 12, b: 40};
  var data = JSON.parse(document.getElementById("fedsparse-data").textContent);

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function bytes(v) {
    var u = [[1e9, "GB"], [1e6, "MB"], [1e3, "KB"]];
    for (var i = 0; i < u.length; i++) if (Math.abs(v) >= u[i][0]) return +(v / u[i][0]).toPrecision(3) + " " + u[i][1];
    return +v.toPrecision(3) + " B";
  }
  function num(v) {
    if (v === 0) return "0";
    var a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(2).replace("e+", "e");
    return String(+v.toPrecision(4));
  }
  function linTicks(lo, hi, n) {
    var span = hi - lo || Math.abs(hi) || 1, step = Math.pow(10, Math.floor(Math.log10(span / n)));
    var err = span / n / step;
    step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
    var t = [], v = Math.ceil(lo / step) * step;
    for (; v <= hi + step * 1e-9; v += step) t.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return t;
  }
  function logTicks(lo, hi) {
    var t = [], a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi));
    var every = Math.max(1, Math.ceil((b - a) / 6));
    for (var e = a; e <= b; e += every) { var v = Math.pow(10, e); if (v >= lo * 0.999 && v <= hi * 1.001) t.push(v); }
    if (t.length < 3) { t = []; for (e = a; e <= b; e++) [1, 2, 5].forEach(function (m) { var v = m * Math.pow(10, e); if (v >= lo && v <= hi) t.push(v); }); }
    if (t.length < 3) t = linTicks(lo, hi, 4).filter(function (v) { return v > 0; });
    return t;
  }

  function Chart(spec, host) {
    this.spec = spec; this.host = host; this.logy = spec.logy; this.hidden = {}; this.view = null;
    var title = document.createElement("div"); title.className = "ctitle"; title.textContent = spec.title; host.appendChild(title);
    var tools = document.createElement("div"); tools.className = "tools"; host.appendChild(tools);
    var self = this;
    if (spec.series.every(function (s) { return s.points.every(function (p) { return p[1] > 0; }); })) {
      var lab = document.createElement("label"), box = document.createElement("input");
      box.type = "checkbox"; box.checked = !!spec.logy; lab.appendChild(box); lab.appendChild(document.createTextNode(" log y"));
      box.addEventListener("change", function () { self.logy = box.checked; self.draw(); });
      tools.appendChild(lab);
    }
    this.svg = el("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": spec.title}, host);
    this.legend = document.createElement("div"); this.legend.className = "legend"; host.appendChild(this.legend);
    this.tip = document.createElement("div"); this.tip.className = "tip"; host.appendChild(this.tip);
    spec.series.forEach(function (s, i) {
      var item = document.createElement("span"), swatch = document.createElement("i");
      swatch.style.borderTopColor = s.color; if (s.dash) swatch.style.borderTopStyle = "dashed";
      item.appendChild(swatch); item.appendChild(document.createTextNode(s.name));
      item.addEventListener("click", function () { self.hidden[i] = !self.hidden[i]; item.classList.toggle("off"); self.draw(); });
      self.legend.appendChild(item);
    });
    this.bind(); this.draw();
  }
  Chart.prototype.visible = function () {
    var self = this; return this.spec.series.filter(function (s, i) { return !self.hidden[i]; });
  };
  Chart.prototype.domain = function () {
    var sp = this.spec, logy = this.logy, xs = [], ys = [], v = this.view;
    this.visible().forEach(function (s) {
      s.points.forEach(function (p) { if (!v || (p[0] >= v[0] && p[0] <= v[1])) { xs.push(p[0]); ys.push(p[1]); } });
      s.band.forEach(function (b) { if (!v || (b[0] >= v[0] && b[0] <= v[1])) { ys.push(b[1]); ys.push(b[2]); } });
    });
    if (logy) ys = ys.filter(function (y) { return y > 0; });
    if (sp.logx) xs = xs.filter(function (x) { return x > 0; });
    if (!xs.length) return null;
    var x0 = v ? v[0] : Math.min.apply(null, xs), x1 = v ? v[1] : Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x0 === x1) { x0 -= 0.5; x1 += 0.5; }
    if (logy) { y0 /= 1.15; y1 *= 1.15; } else { var pad = (y1 - y0) * 0.05 || Math.abs(y0) * 0.05 || 1; y0 -= pad; y1 += pad; }
    return {x0: x0, x1: x1, y0: y0, y1: y1};
  };
  Chart.prototype.draw = function () {
    var svg = this.svg, sp = this.spec, self = this;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var d = this.domain(); this.d = d; if (!d) return;
    var lx = sp.logx, ly = this.logy;
    var fx = function (x) { return lx ? Math.log10(x) : x; }, fy = function (y) { return ly ? Math.log10(y) : y; };
    var X = function (x) { return M.l + (fx(x) - fx(d.x0)) / (fx(d.x1) - fx(d.x0)) * (W - M.l - M.r); };
    var Y = function (y) { return H - M.b - (fy(y) - fy(d.y0)) / (fy(d.y1) - fy(d.y0)) * (H - M.t - M.b); };
    this.X = X; this.Y = Y;
    this.invX = function (px) { var f = fx(d.x0) + (px - M.l) / (W - M.l - M.r) * (fx(d.x1) - fx(d.x0)); return lx ? Math.pow(10, f) : f; };
    var grid = el("g", {"class": "grid"}, svg);
    var xt = lx ? logTicks(d.x0, d.x1) : linTicks(d.x0, d.x1, 6), yt = ly ? logTicks(d.y0, d.y1) : linTicks(d.y0, d.y1, 5);
    if (sp.x === "round") xt = xt.filter(function (t) { return Math.abs(t - Math.round(t)) < 1e-9; });
    xt.forEach(function (t) {
      el("line", {x1: X(t), x2: X(t), y1: M.t, y2: H - M.b, stroke: "#e6e9ee"}, grid);
      el("text", {x: X(t), y: H - M.b + 15, "text-anchor": "middle", "font-size": 11, fill: "#5b6775"}, grid).textContent = sp.bytes ? bytes(t) : num(t);
    });
    yt.forEach(function (t) {
      el("line", {x1: M.l, x2: W - M.r, y1: Y(t), y2: Y(t), stroke: "#e6e9ee"}, grid);
      el("text", {x: M.l - 6, y: Y(t) + 4, "text-anchor": "end", "font-size": 11, fill: "#5b6775"}, grid).textContent = num(t);
    });
    el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, fill: "none", stroke: "#b8c0cc"}, svg);
    el("text", {x: (M.l + W - M.r) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12, fill: "#1d2733"}, svg).textContent = sp.x.replace(/_/g, " ");
    el("text", {x: 14, y: (M.t + H - M.b) / 2, "text-anchor": "middle", "font-size": 12, fill: "#1d2733", transform: "rotate(-90 14 " + (M.t + H - M.b) / 2 + ")"}, svg).textContent = sp.y.replace(/_/g, " ");
    var clipId = sp.id + "-clip";
    var defs = el("defs", {}, svg), clip = el("clipPath", {id: clipId}, defs);
    el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b}, clip);
    var plot = el("g", {"clip-path": "url(#" + clipId + ")"}, svg);
    var ok = function (x, y) { return (!lx || x > 0) && (!ly || y > 0); };
    this.visible().forEach(function (s) {
      var band = s.band.filter(function (b) { return ok(b[0], Math.max(b[1], ly ? b[2] * 1e-3 : b[1])); });
      if (band.length) {
        var up = band.map(function (b) { return X(b[0]) + "," + Y(b[2]); });
        var lo = band.slice().reverse().map(function (b) { return X(b[0]) + "," + Y(ly ? Math.max(b[1], b[2] * 1e-3) : b[1]); });
        el("polygon", {points: up.concat(lo).join(" "), fill: s.color, "fill-opacity": 0.15, stroke: "none"}, plot);
      }
      var path = "", pen = "M";
      s.points.forEach(function (p) {
        if (!ok(p[0], p[1])) { pen = "M"; return; }
        path += pen + X(p[0]).toFixed(2) + " " + Y(p[1]).toFixed(2); pen = "L";
      });
      el("path", {d: path, fill: "none", stroke: s.color, "stroke-width": 1.8, "stroke-dasharray": s.dash || "none", "class": "series", "data-name": s.name}, plot);
      if (s.markers) s.points.forEach(function (p) { if (ok(p[0], p[1])) el("circle", {cx: X(p[0]), cy: Y(p[1]), r: 3, fill: s.color}, plot); });
      if (s.star && ok(s.star[0], s.star[1])) el("text", {x: X(s.star[0]), y: Y(s.star[1]) + 6, "text-anchor": "middle", "font-size": 18, fill: s.color, stroke: "#000", "stroke-width": 0.6}, plot).textContent = "\u2605";
    });
    this.cursor = el("line", {y1: M.t, y2: H - M.b, stroke: "#8a94a3", "stroke-dasharray": "3 3", visibility: "hidden"}, svg);
    this.brush = el("rect", {y: M.t, height: H - M.t - M.b, fill: "#1f6feb", "fill-opacity": 0.12, visibility: "hidden"}, svg);
  };
  Chart.prototype.px = function (ev) {
    var r = this.svg.getBoundingClientRect();
    return {x: (ev.clientX - r.left) * W / r.width, y: (ev.clientY - r.top) * H / r.height};
  };
  Chart.prototype.bind = function () {
    var self = this, start = null;
    this.svg.addEventListener("mousedown", function (ev) { start = self.px(ev).x; ev.preventDefault(); });
    this.svg.addEventListener("mousemove", function (ev) {
      if (!self.d) return;
      var p = self.px(ev), inside = p.x >= M.l && p.x <= W - M.r;
      if (start !== null) {
        var a = Math.max(M.l, Math.min(start, p.x)), b = Math.min(W - M.r, Math.max(start, p.x));
        self.brush.setAttribute("x", a); self.brush.setAttribute("width", b - a); self.brush.setAttribute("visibility", "visible");
      }
      if (!inside) { self.hideTip(); return; }
      self.showTip(p, ev);
    });
    this.svg.addEventListener("mouseleave", function () { self.hideTip(); });
    window.addEventListener("mouseup", function (ev) {
      if (start === null) return;
      var end = self.px(ev).x, a = Math.min(start, end), b = Math.max(start, end); start = null;
      self.brush.setAttribute("visibility", "hidden");
      if (b - a > 6) { self.view = [self.invX(Math.max(a, M.l)), self.invX(Math.min(b, W - M.r))]; self.draw(); }
    });
    this.svg.addEventListener("dblclick", function () { self.view = null; self.draw(); });
  };
  Chart.prototype.showTip = function (p, ev) {
    var x = this.invX(p.x), lines = [], sp = this.spec, self = this, best = null;
    this.visible().forEach(function (s) {
      var q = null, dist = Infinity;
      s.points.forEach(function (pt) { var dd = Math.abs(self.X(pt[0]) - p.x); if (dd < dist) { dist = dd; q = pt; } });
      if (q && dist < 40) { lines.push([s, q]); if (best === null || Math.abs(q[0] - x) < Math.abs(best - x)) best = q[0]; }
    });
    if (!lines.length) { this.hideTip(); return; }
    this.cursor.setAttribute("x1", this.X(best)); this.cursor.setAttribute("x2", this.X(best)); this.cursor.setAttribute("visibility", "visible");
    var head = sp.x.replace(/_/g, " ") + " = " + (sp.bytes ? bytes(best) : num(best));
    this.tip.innerHTML = "";
    var h = document.createElement("div"); h.style.fontWeight = "600"; h.textContent = head; this.tip.appendChild(h);
    lines.forEach(function (l) {
      var row = document.createElement("div"), sw = document.createElement("span");
      sw.textContent = "\u25A0 "; sw.style.color = l[0].color; row.appendChild(sw);
      row.appendChild(document.createTextNode(l[0].name + ": " + String(+l[1][1].toPrecision(6))));
      self.tip.appendChild(row);
    });
    var r = this.host.getBoundingClientRect(), left = ev.clientX - r.left + 14;
    this.tip.style.display = "block";
    if (left + this.tip.offsetWidth > r.width) left = ev.clientX - r.left - this.tip.offsetWidth - 14;
    this.tip.style.left = left + "px"; this.tip.style.top = (ev.clientY - r.top + 10) + "px";
  };
  Chart.prototype.hideTip = function () { this.tip.style.display = "none"; if (this.cursor) this.cursor.setAttribute("visibility", "hidden"); };

  (data.charts || []).forEach(function (spec) {
    var host = document.getElementById(spec.id);
    if (host) { host.chart = new Chart(spec, host); host.setAttribute("data-ready", "1"); }
  });
  document.documentElement.setAttribute("data-charts", String((data.charts || []).length));
})();
