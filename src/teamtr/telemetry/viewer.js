// TeamTR episode viewer: reads the JSON in #viewer-data (see teamtr/telemetry/viewer.py) and draws one
// decision at a time into #viewer. Every text from a run goes in through textContent, never as markup.
// URL fragment: #episode=E&step=S (S-th decision) or #episode=E&tick=T (first decision at tick >= T).
(function () {
  "use strict";
  var root = document.getElementById("viewer");
  var groups = JSON.parse(document.getElementById("viewer-data").textContent);
  var episodes = [];
  var current = { episode: 0, step: 0 };

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function fmt(x) {
    return typeof x === "number" ? (Math.round(x * 1000) / 1000).toString() : "—";
  }
  function outcome(ep) { return ep.success ? "success" : "failure"; }

  // Controls: episode list grouped by source, prev/next, a slider over the decisions.
  var controls = el("div", "v-controls");
  var picker = el("select");
  picker.id = "v-episode";
  groups.forEach(function (group) {
    var optgroup = el("optgroup");
    optgroup.label = group.label;
    group.episodes.forEach(function (ep) {
      ep.group = group.label;
      var label = "seed " + fmt(ep.seed) + " · " + outcome(ep) + " · return " + fmt(ep["return"]) +
        " · " + ep.decisions + " decisions";
      var option = el("option", ep.success ? "v-success" : "v-failure", label);
      option.value = String(episodes.length);
      optgroup.appendChild(option);
      episodes.push(ep);
    });
    picker.appendChild(optgroup);
  });
  var prev = el("button", null, "◀ prev");
  var next = el("button", null, "next ▶");
  prev.id = "v-prev";
  next.id = "v-next";
  var slider = el("input");
  slider.type = "range";
  slider.id = "v-slider";
  slider.min = "0";
  var position = el("span", "v-position");
  position.id = "v-position";
  [picker, prev, next, slider, position].forEach(function (n) { controls.appendChild(n); });
  var meta = el("div", "v-meta");
  meta.id = "v-meta";
  var body = el("div", "v-body");
  body.id = "v-step";
  root.appendChild(controls);
  root.appendChild(meta);
  root.appendChild(body);

  function section(title, content) {
    var box = el("div", "v-box");
    box.appendChild(el("h4", null, title));
    box.appendChild(content);
    return box;
  }
  function list(items, empty) {
    if (!items.length) return el("p", "v-none", empty);
    var ol = el("ol");
    items.forEach(function (item) { ol.appendChild(el("li", null, item)); });
    return ol;
  }
  function table(mapping, valueFmt) {
    var keys = Object.keys(mapping);
    var t = el("table", "v-table");
    keys.forEach(function (key) {
      var row = el("tr");
      row.appendChild(el("td", null, key));
      row.appendChild(el("td", null, valueFmt(mapping[key])));
      t.appendChild(row);
    });
    return t;
  }
  function candidates(step) {
    var ol = el("ol", "v-candidates");
    ol.start = 0;
    step.candidates.forEach(function (text, i) {
      var li = el("li", i === step.choice ? "v-cand v-chosen" : "v-cand");
      if (step.probs) {
        var bar = el("span", "v-bar");
        var fill = el("span", "v-fill");
        var p = typeof step.probs[i] === "number" ? step.probs[i] : 0;
        fill.style.width = Math.max(0, Math.min(1, p)) * 100 + "%";
        bar.appendChild(fill);
        li.appendChild(bar);
        li.appendChild(el("span", "v-prob", fmt(p)));
      }
      li.appendChild(el("span", "v-text", text));
      if (i === step.choice) li.appendChild(el("span", "v-mark", " ← chosen"));
      ol.appendChild(li);
    });
    return ol;
  }
  function reward(step) {
    var box = el("div");
    box.appendChild(el("p", "v-reward", "reward " + fmt(step.reward)));
    if (step.terms) box.appendChild(table(step.terms, fmt));
    return box;
  }

  function draw() {
    var ep = episodes[current.episode];
    var step = ep.steps[current.step];
    picker.value = String(current.episode);
    slider.max = String(Math.max(0, ep.steps.length - 1));
    slider.value = String(current.step);
    prev.disabled = current.step <= 0;
    next.disabled = current.step >= ep.steps.length - 1;
    position.textContent = "decision " + (current.step + 1) + " / " + ep.steps.length +
      (step ? " · tick " + fmt(step.tick) : "");
    var cut = ep.decisions > ep.steps.length ? " (first " + ep.steps.length + " shown)" : "";
    meta.textContent = ep.group + " · " + ep.task + " · seed " + fmt(ep.seed) + " · " + outcome(ep) +
      " · return " + fmt(ep["return"]) + " · " + ep.decisions + " decisions" + cut;
    meta.className = "v-meta " + (ep.success ? "v-success" : "v-failure");
    body.textContent = "";
    if (!step) {
      body.appendChild(el("p", "v-none", "This episode has no decisions."));
      return;
    }
    body.appendChild(section("State", el("pre", "v-state", step.state)));
    body.appendChild(section("History", list(step.history, "(none)")));
    body.appendChild(section("Candidates" + (step.probs ? " (coordinator's probabilities)" : ""),
      candidates(step)));
    body.appendChild(section("Directive", el("p", "v-directive", step.directive)));
    if (step.actions) body.appendChild(section("Agents' actions", table(step.actions, String)));
    body.appendChild(section("Events", list(step.events, "(none)")));
    body.appendChild(section("Reward", reward(step)));
    try {
      history.replaceState(null, "", "#episode=" + current.episode + "&step=" + current.step);
    } catch (e) { /* a page opened where the URL cannot change still works */ }
  }

  function go(episode, step) {
    current.episode = Math.max(0, Math.min(episodes.length - 1, episode));
    var n = episodes[current.episode].steps.length;
    current.step = Math.max(0, Math.min(n - 1, step));
    draw();
  }
  function fromHash() {
    var args = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var parts = kv.split("=");
      if (parts.length === 2) args[parts[0]] = parseInt(parts[1], 10);
    });
    var e = isFinite(args.episode) ? args.episode : 0;
    var s = isFinite(args.step) ? args.step : 0;
    var ep = episodes[Math.max(0, Math.min(episodes.length - 1, e))];
    if (isFinite(args.tick) && ep) {
      s = ep.steps.length - 1;
      for (var i = 0; i < ep.steps.length; i++) {
        if (ep.steps[i].tick >= args.tick) { s = i; break; }
      }
    }
    go(e, s);
  }

  picker.addEventListener("change", function () { go(parseInt(picker.value, 10), 0); });
  prev.addEventListener("click", function () { go(current.episode, current.step - 1); });
  next.addEventListener("click", function () { go(current.episode, current.step + 1); });
  slider.addEventListener("input", function () { go(current.episode, parseInt(slider.value, 10)); });
  document.addEventListener("keydown", function (event) {
    var tag = event.target && event.target.tagName;
    if (tag === "SELECT" || tag === "INPUT" || tag === "TEXTAREA") return;
    if (event.key === "ArrowLeft") { go(current.episode, current.step - 1); event.preventDefault(); }
    if (event.key === "ArrowRight") { go(current.episode, current.step + 1); event.preventDefault(); }
  });
  window.addEventListener("hashchange", function () {
    var expected = "#episode=" + current.episode + "&step=" + current.step;
    if (location.hash !== expected) fromHash();
  });

  if (episodes.length) fromHash();
  root.setAttribute("data-ok", "1");
})();
