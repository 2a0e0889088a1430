/* trtverify report: the dataflow graph of a layerwise candidate, laid out by dagre (vendor/dagre.min.js).
   Data: a JSON script element built by trtverify/report/graphview.py; names go into the page as text
   only (textContent, attributes), never as markup. Two views: the neighbourhood of root cause #1 and the first
   divergence (default; "+n" handles add hidden neighbours), and the whole graph, its nodes folded into groups by
   name prefix (/stage3/...) and runs of at most GROUP_MAX, each unfolded by a click. */
(function () {
  "use strict";
  if (!window.dagre) return;
  var NS = "http://www.w3.org/2000/svg";
  var F = { FAIL: 1, PLUGIN: 2, KEPT: 4, INDEX: 8, UNCOMPARED: 16, ACC_NONFINITE: 32, LOCAL_NONFINITE: 64 };
  var EDGES = [1e-4, 1e-3, 1e-2, 1e-1];
  var FILL = ["#dcefe0", "#b5dfa8", "#fbe38e", "#f9ae62", "#e8553e"], NONFINITE = "#6b0f1a", NONE = "#f4f5f8";
  var PREC = { FP32: "#7c8aa5", TF32: "#5d7ec4", BF16: "#2f9e8f", FP16: "#3b6fd4", FP8: "#b05bd6", INT8: "#e8860c", INT4: "#c0392b", FP64: "#555" };
  var HOPS = 4, NEAR_MAX = 48, GROUP_MAX = 40, SMALL = 60, W = 176, H = 42;

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, cls, s) { var t = el("text", { x: x, y: y, "class": cls }, parent); t.textContent = s; return t; }
  function fmt(v) { return v === null ? "–" : v === 0 ? "0" : Math.abs(v) < 1e-3 || Math.abs(v) >= 1e4 ? v.toExponential(2) : String(+v.toPrecision(3)); }
  function short(it) { return it.isNode ? it.name.split("/").filter(Boolean).slice(-2).join("/") : it.label; }
  function clip(s, n) { return s.length > n ? "…" + s.slice(s.length - n + 1) : s; }

  // ---- the graph, its groups, and each node's error
  function Model(d) {
    var m = this;
    m.d = d;
    m.nodes = d.nodes.map(function (a, i) {
      return { i: i, isNode: true, id: "n" + i, name: a[0], op: a[1], topo: a[2], prec: a[3], local: a[4], acc: a[5], flags: a[6] };
    });
    m.preds = m.nodes.map(function () { return []; });
    m.succs = m.nodes.map(function () { return []; });
    d.from.forEach(function (u, k) { m.succs[u].push(d.to[k]); m.preds[d.to[k]].push(u); });
    m.rank = {};
    d.roots.forEach(function (p, r) { if (!(p in m.rank)) m.rank[p] = r + 1; });
    m.seeds = [d.roots.length ? d.roots[0] : null, d.first].filter(function (p) { return p !== null; });
    if (!m.seeds.length) m.seeds = [0];  // nothing to localise: the graph from its start
    m.root = { key: "", id: "g", isGroup: true, label: "", kids: [], members: [], parent: null };
    var groups = { "": m.root };
    m.nodes.forEach(function (n) {
      var parts = n.name.split("/").filter(Boolean), g = m.root, path = "";
      parts.pop();
      parts.forEach(function (p) {
        path += "/" + p;
        if (!groups[path]) { groups[path] = { key: path, id: "g" + path, isGroup: true, label: p, kids: [], members: [], parent: g }; g.kids.push(groups[path]); }
        g = groups[path];
      });
      g.kids.push(n);
      n.parent = g;
    });
    m.groups = {};
    m.fold(m.root);
    m.members(m.root);
  }
  Model.prototype.first = function (it) { return it.isNode ? it.i : it.members[0]; };
  // a group of one item is that item; a group of more than GROUP_MAX items is split into runs (in graph order)
  Model.prototype.fold = function (g) {
    var m = this;
    g.kids = g.kids.map(function (k) {
      if (k.isNode) return k;
      m.fold(k);
      if (k.kids.length === 1) { k.kids[0].parent = g; return k.kids[0]; }
      return k;
    });
    m.groups[g.key] = g;
    if (g.kids.length > GROUP_MAX) {
      m.members(g);
      g.kids.sort(function (a, b) { return m.first(a) - m.first(b); });
      var size = Math.ceil(g.kids.length / GROUP_MAX), runs = [];
      for (var s = 0; s < g.kids.length; s += size) {
        var kids = g.kids.slice(s, s + size), run = { key: g.key + "#" + s, id: "g" + g.key + "#" + s, isGroup: true, isRun: true, kids: kids, members: [], parent: g,
          label: clip(short(kids[0]), 12) + " … " + clip(short(kids[kids.length - 1]), 12) };
        kids.forEach(function (k) { k.parent = run; });
        runs.push(run);
        m.fold(run);
      }
      g.kids = runs;
    }
  };
  Model.prototype.members = function (g) {
    var m = this;
    g.members = [];
    g.kids.forEach(function (k) { if (k.isNode) g.members.push(k.i); else g.members = g.members.concat(m.members(k)); });
    g.members.sort(function (a, b) { return a - b; });
    return g.members;
  };
  // an error as (class, value): class 0 none, 1 a value, 2 non-finite; index outputs have none
  Model.prototype.err = function (n, metric) {
    if (n.flags & F.INDEX) return [0, null];
    if (n.flags & (metric === "acc" ? F.ACC_NONFINITE : F.LOCAL_NONFINITE)) return [2, null];
    var v = metric === "acc" ? n.acc : n.local;
    return v === null ? [0, null] : [1, Math.max(v, 0)];
  };
  Model.prototype.itemErr = function (it, metric) {
    if (it.isNode) return this.err(it, metric);
    var best = [0, null], m = this;
    it.members.forEach(function (i) {
      var e = m.err(m.nodes[i], metric);
      if (e[0] > best[0] || (e[0] === 1 && best[0] === 1 && e[1] > best[1])) best = e;
    });
    return best;
  };
  function fill(e) {
    if (e[0] === 0) return NONE;
    if (e[0] === 2) return NONFINITE;
    for (var b = 0; b < EDGES.length; b++) if (e[1] < EDGES[b]) return FILL[b];
    return FILL[EDGES.length];
  }

  // ---- one view of one candidate's graph
  function View(box) {
    var v = this;
    box.getBoundingClientRect();  // the page's first layout (a long tensor table's) is not the graph's time
    var t0 = performance.now();
    v.box = box;
    v.m = new Model(JSON.parse(document.getElementById(box.dataset.src).textContent));
    v.svg = box.querySelector("svg.graph-svg");
    v.metric = "acc";
    v.mode = "near";
    v.focus = v.near();
    v.expanded = {};
    v.m.seeds.forEach(function (p) { for (var g = v.m.nodes[p].parent; g; g = g.parent) v.expanded[g.key] = true; });
    v.t = { s: 1, x: 0, y: 0 };
    v.wire();
    v.render(v.m.seeds[0]);
    box.dataset.initMs = (performance.now() - t0).toFixed(1);  // reading the data, grouping, the first drawing
  }
  // nodes within HOPS edges of each seed, the nearest first, at most NEAR_MAX around each
  View.prototype.near = function () {
    var m = this.m, focus = {};
    if (m.nodes.length <= SMALL) { m.nodes.forEach(function (n) { focus[n.i] = true; }); return focus; }
    m.seeds.forEach(function (s) {
      var seen = {}, queue = [s], depth = {}, n = 0;
      seen[s] = true; depth[s] = 0;
      while (queue.length && n < NEAR_MAX) {
        var u = queue.shift();
        focus[u] = true; n += 1;
        if (depth[u] === HOPS) continue;
        m.preds[u].concat(m.succs[u]).forEach(function (w) { if (!seen[w]) { seen[w] = true; depth[w] = depth[u] + 1; queue.push(w); } });
      }
    });
    return focus;
  };
  View.prototype.items = function () {
    var v = this, m = v.m, items = [], rep = new Array(m.nodes.length), clusters = [];
    if (v.mode === "near") {
      Object.keys(v.focus).forEach(function (k) { items.push(m.nodes[+k]); rep[+k] = m.nodes[+k]; });
    } else {
      var walk = function (g) {
        g.kids.forEach(function (k) {
          if (k.isNode) { items.push(k); rep[k.i] = k; }
          else if (v.expanded[k.key]) { clusters.push(k); walk(k); }
          else { items.push(k); k.members.forEach(function (i) { rep[i] = k; }); }
        });
      };
      walk(m.root);
    }
    var edges = {}, list = [];
    m.d.from.forEach(function (u, k) {
      var a = rep[u], b = rep[m.d.to[k]];
      if (a && b && a !== b && !edges[a.id + ">" + b.id]) { edges[a.id + ">" + b.id] = true; list.push([a, b]); }
    });
    return { items: items, edges: list, clusters: clusters };
  };
  // lay out and draw what the view shows; `keep`: the same layout recoloured, the viewpoint kept
  View.prototype.render = function (centreOn, keep) {
    var v = this, m = v.m;
    v.svg.getBoundingClientRect();  // the page's own layout first: its time is not the graph's
    var t0 = performance.now(), shown = v.items();
    var g = new dagre.graphlib.Graph({ compound: true });
    g.setGraph({ rankdir: "TB", nodesep: 16, ranksep: 26, marginx: 16, marginy: 16 });
    g.setDefaultEdgeLabel(function () { return {}; });
    shown.clusters.forEach(function (c) { g.setNode(c.id, {}); });
    shown.items.forEach(function (it) { g.setNode(it.id, { width: W, height: H }); });
    shown.clusters.concat(shown.items).forEach(function (it) {
      if (it.parent && it.parent !== m.root && v.mode === "whole") g.setParent(it.id, it.parent.id);
    });
    shown.edges.forEach(function (e) { g.setEdge(e[0].id, e[1].id); });
    dagre.layout(g);
    var vp = v.svg.querySelector("g.gv-viewport");
    vp.textContent = "";
    var layer = { clusters: el("g", {}, vp), edges: el("g", { "class": "gv-edges" }, vp), nodes: el("g", {}, vp) };
    shown.clusters.forEach(function (c) { v.drawCluster(layer.clusters, c, g.node(c.id)); });
    shown.edges.forEach(function (e) {
      // across one rank dagre's middle point (and so its ends) can swing far aside: a curve from bottom to top instead
      var pts = g.edge(e[0].id, e[1].id).points, u = g.node(e[0].id), w = g.node(e[1].id);
      var a = pts.length <= 3 ? { x: u.x, y: u.y + H / 2 } : pts[0], b = pts.length <= 3 ? { x: w.x, y: w.y - H / 2 } : pts[pts.length - 1];
      var my = ((a.y + b.y) / 2).toFixed(1);
      var d = pts.length <= 3 ? "M" + a.x.toFixed(1) + "," + a.y.toFixed(1) + "C" + a.x.toFixed(1) + "," + my + " " + b.x.toFixed(1) + "," + my + " " + b.x.toFixed(1) + "," + b.y.toFixed(1)
        : "M" + pts.map(function (p) { return p.x.toFixed(1) + "," + p.y.toFixed(1); }).join("L");
      el("path", { d: d, "class": "gv-edge", "marker-end": "url(#" + v.box.id + "-arrow)" }, layer.edges);
    });
    v.at = {};
    shown.items.forEach(function (it) {
      var p = g.node(it.id);
      v.at[it.id] = p;
      if (it.isNode) v.drawNode(layer.nodes, it, p); else v.drawGroup(layer.nodes, it, p);
    });
    var size = g.graph();
    v.size = { w: size.width, h: size.height };
    if (keep) v.apply(); else v.place(centreOn);
    v.box.dataset.renderMs = (performance.now() - t0).toFixed(1);
    v.box.dataset.drawnAt = performance.now().toFixed(1);  // since the page began to load
    v.box.dataset.items = String(shown.items.length);
    v.box.querySelector(".gv-status").textContent = (v.mode === "near" ? "Around the root cause and the first divergence: " : "Whole graph, folded: ") +
      shown.items.length + " of " + m.nodes.length + " nodes or groups shown.";
  };
  View.prototype.marks = function (it) {
    var ids = [], rank = this.m.rank[it.i];
    if (rank) ids.push("gv-root");
    if (it.i === this.m.d.first) ids.push("gv-first");
    return ids;
  };
  View.prototype.drawNode = function (layer, n, p) {
    var v = this, err = v.m.itemErr(n, v.metric), rank = v.m.rank[n.i];
    var g = el("g", { "class": ["gv-node"].concat(v.marks(n)).join(" "), transform: "translate(" + (p.x - W / 2) + "," + (p.y - H / 2) + ")", "data-pos": n.i, "data-topo": n.topo, tabindex: "0" }, layer);
    if (rank) g.setAttribute("data-rank", rank);
    var stroke = n.i === v.m.d.first ? "#5b1fb0" : rank ? "#b45f00" : n.flags & F.FAIL ? "#b42318" : "#8a93a6";
    var rect = el("rect", { width: W, height: H, rx: 5, fill: n.flags & F.INDEX ? "url(#" + v.box.id + "-hatch)" : fill(err), stroke: stroke,
      "stroke-width": rank || n.i === v.m.d.first ? 3 : n.flags & F.FAIL ? 1.8 : 1 }, g);
    if (n.flags & F.PLUGIN) rect.setAttribute("stroke-dasharray", "5 3");
    var dark = err[0] === 2 || (err[0] === 1 && err[1] >= EDGES[EDGES.length - 1]);
    text(g, 7, 32, "gv-name" + (dark ? " gv-dark" : ""), clip(n.name, 27));
    var bx = W - 4;
    if (n.prec) {
      var label = n.prec.replace("FP", "").replace("BF16", "BF").replace("INT", "I");
      bx -= 24;
      el("rect", { x: bx, y: 4, width: 22, height: 13, rx: 3, fill: PREC[n.prec] || "#999" }, g);
      text(g, bx + 11, 14, "gv-badge", label);
    }
    if (n.flags & F.KEPT) { bx -= 34; el("rect", { x: bx, y: 4, width: 32, height: 13, rx: 3, fill: "#1f7a4d" }, g); text(g, bx + 16, 14, "gv-badge", "keep"); }
    var op = n.op + (n.flags & F.PLUGIN ? " (plugin)" : ""), room = Math.floor((bx - 10) / 6.6);  // 11px bold
    text(g, 7, 16, "gv-op" + (dark ? " gv-dark" : ""), op.length > room ? op.slice(0, room - 1) + "…" : op);
    if (rank) { el("rect", { x: -2, y: -12, width: 30, height: 13, rx: 3, fill: "#b45f00" }, g); text(g, 13, -2, "gv-badge", "#" + rank); }
    if (n.i === v.m.d.first) { el("rect", { x: 30, y: -12, width: 64, height: 13, rx: 3, fill: "#5b1fb0" }, g); text(g, 62, -2, "gv-badge", "first div."); }
    var e = v.m.err(n, "acc"), l = v.m.err(n, "local"), tip = [n.name, n.op + " · #" + n.topo + (n.prec ? " · " + n.prec : "")];
    tip.push(n.flags & F.INDEX ? "index output: compared by what it selects, not as an error"
      : n.flags & F.UNCOMPARED ? "not compared" : "output rel_l2 " + (e[0] === 2 ? "non-finite" : fmt(e[1])) + " · adds " + (l[0] === 2 ? "non-finite" : fmt(l[1])));
    if (rank) tip.push("root cause #" + rank);
    if (n.i === v.m.d.first) tip.push("first divergence");
    if (n.flags & F.FAIL) tip.push("fails a check");
    if (n.flags & F.KEPT) tip.push("kept in FP32");
    if (n.flags & F.PLUGIN) tip.push("plugin (no ONNX op)");
    if (!(n.flags & F.UNCOMPARED)) tip.push("click: its row in the table");
    el("title", {}, g).textContent = tip.join("\n");
    g.addEventListener("click", function () { v.select(n); });
    g.addEventListener("keydown", function (ev) { if (ev.key === "Enter") v.select(n); });
    if (v.mode === "near") {
      var up = v.m.preds[n.i].filter(function (u) { return !v.focus[u]; }), down = v.m.succs[n.i].filter(function (u) { return !v.focus[u]; });
      [[up, -7, "▲"], [down, H + 7, "▼"]].forEach(function (h) {
        if (!h[0].length) return;
        var hg = el("g", { "class": "gv-more", transform: "translate(" + (W - 36) + "," + (h[1] - 6) + ")", tabindex: "0" }, g);
        el("rect", { width: 32, height: 12, rx: 6 }, hg);
        text(hg, 16, 9.5, "gv-more-t", "+" + h[0].length + " " + h[2]);
        el("title", {}, hg).textContent = "show " + h[0].length + " more " + (h[2] === "▲" ? "inputs" : "readers");
        var more = function (ev) { ev.stopPropagation(); h[0].forEach(function (u) { v.focus[u] = true; }); v.render(n.i); };
        hg.addEventListener("click", more);
        hg.addEventListener("keydown", function (ev) { if (ev.key === "Enter") more(ev); });
      });
    }
  };
  View.prototype.drawGroup = function (layer, it, p) {
    var v = this, err = v.m.itemErr(it, v.metric), m = v.m;
    var hasRoot = m.seeds.length && m.d.roots.length && it.members.indexOf(m.d.roots[0]) >= 0, hasFirst = it.members.indexOf(m.d.first) >= 0;
    var g = el("g", { "class": "gv-group", transform: "translate(" + (p.x - W / 2) + "," + (p.y - H / 2) + ")", tabindex: "0" }, layer);
    el("rect", { x: 3, y: 3, width: W, height: H, rx: 5, fill: "#fff", stroke: "#8a93a6" }, g);
    el("rect", { width: W, height: H, rx: 5, fill: fill(err), stroke: hasFirst ? "#5b1fb0" : hasRoot ? "#b45f00" : "#5d6578", "stroke-width": hasRoot || hasFirst ? 3 : 1.2 }, g);
    var dark = err[0] === 2 || (err[0] === 1 && err[1] >= EDGES[EDGES.length - 1]);
    text(g, 7, 16, "gv-op" + (dark ? " gv-dark" : ""), "▸ " + clip(it.label, 24));
    text(g, 7, 32, "gv-name" + (dark ? " gv-dark" : ""), it.members.length + " nodes · worst " + (err[0] === 2 ? "non-finite" : fmt(err[1])));
    el("title", {}, g).textContent = (it.isRun ? it.parent.key || "graph" : it.key) + ": " + it.members.length + " nodes" +
      (hasRoot ? ", root cause #1" : "") + (hasFirst ? ", first divergence" : "") + "\nclick: unfold";
    var unfold = function () { v.expanded[it.key] = true; v.render(m.first(it)); };
    g.addEventListener("click", unfold);
    g.addEventListener("keydown", function (ev) { if (ev.key === "Enter") unfold(); });
  };
  // an unfolded group: a box round its items, its title at the top, left and right in turn by depth (nested boxes'
  // tops are only a few pixels apart)
  View.prototype.drawCluster = function (layer, c, p) {
    var v = this, g = el("g", { "class": "gv-cluster" }, layer), depth = 0;
    for (var a = c.parent; a && a !== v.m.root; a = a.parent) depth += 1;
    el("rect", { x: p.x - p.width / 2, y: p.y - p.height / 2, width: p.width, height: p.height, rx: 6 }, g);
    var left = depth % 2 === 0, x = left ? p.x - p.width / 2 + 8 : p.x + p.width / 2 - 8;
    var label = text(g, x, p.y - p.height / 2 + 12, "gv-cluster-t", "▾ " + clip(c.label, 40));
    if (!left) label.setAttribute("text-anchor", "end");
    el("title", {}, label).textContent = "click: fold " + (c.key || "these") + " (" + c.members.length + " nodes)";
    label.addEventListener("click", function () { delete v.expanded[c.key]; v.render(v.m.first(c)); });
  };
  View.prototype.select = function (n) {
    this.svg.querySelectorAll(".gv-selected").forEach(function (e) { e.classList.remove("gv-selected"); });
    var g = this.svg.querySelector('.gv-node[data-pos="' + n.i + '"]');
    if (g) g.classList.add("gv-selected");
    if (!(n.flags & F.UNCOMPARED)) location.hash = this.m.d.row + n.topo;
  };
  // fit the drawing when it is legible at that scale; else full size, centred on the item holding `centreOn`
  View.prototype.place = function (centreOn) {
    var v = this, box = v.svg.getBoundingClientRect(), w = box.width || 900, h = box.height || 520;
    var s = Math.min(1, (w - 8) / v.size.w, (h - 8) / v.size.h);
    if (s >= 0.6) { v.t = { s: s, x: (w - v.size.w * s) / 2, y: (h - v.size.h * s) / 2 }; }
    else {
      s = 0.9;
      var p = v.locate(centreOn) || { x: v.size.w / 2, y: v.size.h / 2 };
      v.t = { s: s, x: fit(w / 2 - p.x * s, w, v.size.w * s), y: fit(h / 2 - p.y * s, h, v.size.h * s) };
    }
    v.apply();
  };
  // an offset that leaves no empty margin beside a drawing larger than the view (one smaller is centred)
  function fit(offset, view, drawn) {
    return drawn <= view ? (view - drawn) / 2 : Math.min(8, Math.max(view - drawn - 8, offset));
  }
  View.prototype.locate = function (pos) {
    if (pos === null || pos === undefined) return null;
    var n = this.m.nodes[pos];
    if (this.at[n.id]) return this.at[n.id];
    for (var g = n.parent; g; g = g.parent) if (this.at[g.id]) return this.at[g.id];
    return null;
  };
  View.prototype.apply = function () {
    this.svg.querySelector("g.gv-viewport").setAttribute("transform", "translate(" + this.t.x.toFixed(1) + "," + this.t.y.toFixed(1) + ") scale(" + this.t.s.toFixed(3) + ")");
  };
  View.prototype.zoom = function (f, cx, cy) {
    var t = this.t, s = Math.max(0.1, Math.min(2.5, t.s * f));
    t.x = cx - (cx - t.x) * s / t.s; t.y = cy - (cy - t.y) * s / t.s; t.s = s;
    this.apply();
  };
  View.prototype.wire = function () {
    var v = this, box = v.box, svg = v.svg;
    var defs = el("defs", {}, svg);
    var mk = el("marker", { id: box.id + "-arrow", viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" }, defs);
    el("path", { d: "M0,0L8,4L0,8z", fill: "#8a93a6" }, mk);
    var pat = el("pattern", { id: box.id + "-hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, defs);
    el("rect", { width: 6, height: 6, fill: "#eef0f4" }, pat);
    el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#c3c8d4", "stroke-width": 2 }, pat);
    el("g", { "class": "gv-viewport" }, svg);
    box.querySelectorAll("input.gv-metric").forEach(function (r) {
      r.addEventListener("change", function () { v.metric = r.value; v.render(null, true); });
    });
    var whole = box.querySelector(".gv-whole"), near = box.querySelector(".gv-near");
    whole.addEventListener("click", function () { v.mode = "whole"; whole.hidden = true; near.hidden = false; v.render(v.m.seeds[0]); });
    near.addEventListener("click", function () { v.mode = "near"; v.focus = v.near(); near.hidden = true; whole.hidden = false; v.render(v.m.seeds[0]); });
    box.querySelector(".gv-fit").addEventListener("click", function () {
      var r = svg.getBoundingClientRect(), s = Math.min(2.5, (r.width - 8) / v.size.w, (r.height - 8) / v.size.h);
      v.t = { s: s, x: (r.width - v.size.w * s) / 2, y: (r.height - v.size.h * s) / 2 };
      v.apply();
    });
    box.querySelector(".gv-in").addEventListener("click", function () { var r = svg.getBoundingClientRect(); v.zoom(1.25, r.width / 2, r.height / 2); });
    box.querySelector(".gv-out").addEventListener("click", function () { var r = svg.getBoundingClientRect(); v.zoom(0.8, r.width / 2, r.height / 2); });
    svg.addEventListener("wheel", function (ev) {
      if (!ev.ctrlKey && !ev.metaKey) return;  // a plain wheel scrolls the page
      ev.preventDefault();
      var r = svg.getBoundingClientRect();
      v.zoom(ev.deltaY < 0 ? 1.15 : 1 / 1.15, ev.clientX - r.left, ev.clientY - r.top);
    }, { passive: false });
    var drag = null;
    svg.addEventListener("pointerdown", function (ev) {
      if (ev.target.closest(".gv-node, .gv-group, .gv-more, .gv-cluster-t")) return;
      drag = { x: ev.clientX, y: ev.clientY, tx: v.t.x, ty: v.t.y };
      svg.setPointerCapture(ev.pointerId);
    });
    svg.addEventListener("pointermove", function (ev) {
      if (!drag) return;
      v.t.x = drag.tx + ev.clientX - drag.x; v.t.y = drag.ty + ev.clientY - drag.y;
      v.apply();
    });
    svg.addEventListener("pointerup", function () { drag = null; });
    box.querySelector(".graph-controls").hidden = false;
  };

  // Each box is drawn by the one-line script right after it, as the page is parsed: before the tables below it,
  // which on a model of thousands of tensors take the browser seconds. A box nobody drew is drawn here.
  window.trtverifyGraphs = [];
  window.trtverifyGraph = function (id) {
    var box = document.getElementById(id);
    if (box && !box.dataset.view) { box.dataset.view = "1"; window.trtverifyGraphs.push(new View(box)); }
  };
  document.querySelectorAll(".graph-view").forEach(function (box) { window.trtverifyGraph(box.id); });
})();
