/* envreplica report: stepping through each trace, its current gate edge, and the filter.
   The page reads fine without it (every step and every diff is there). */
(function () {
  "use strict";
  var body = document.body;
  body.classList.remove("nojs");
  body.classList.add("js");

  function each(list, fn) { Array.prototype.forEach.call(list, fn); }
  function byAttr(root, selector, name, value) {
    var all = root.querySelectorAll(selector);
    for (var i = 0; i < all.length; i++) {
      if (all[i].getAttribute(name) === value) { return all[i]; }
    }
    return null;
  }

  function setup(section) {
    var rows = Array.prototype.slice.call(section.querySelectorAll("table.steps tr.step"));
    var diffs = section.querySelectorAll(".step-diff");
    var svg = section.querySelector(".diagram svg");
    var shown = section.querySelector(".stepper .current-step");
    var current = -1;

    function select(i, scroll) {
      if (!rows.length) { return; }
      current = Math.max(0, Math.min(rows.length - 1, i));
      var row = rows[current];
      var step = row.getAttribute("data-step");
      each(rows, function (r) { r.classList.toggle("current", r === row); });
      each(diffs, function (d) { d.classList.toggle("current", d.getAttribute("data-step") === step); });
      if (svg) {
        each(svg.querySelectorAll("g.current"), function (g) { g.classList.remove("current"); });
        var edge = row.getAttribute("data-edge");
        var g = edge ? byAttr(svg, "g.edge", "data-edge", edge) : null;
        if (g) { g.classList.add("current"); }
        var gate = row.getAttribute("data-gate");
        var node = gate ? byAttr(svg, "g.node", "data-node", gate.replace(/\./g, "_")) : null;
        if (node) { node.classList.add("current"); }
      }
      if (shown) { shown.textContent = step; }
      section.setAttribute("data-current", step);
      if (scroll && row.scrollIntoView) { row.scrollIntoView({block: "nearest"}); }
    }

    each(rows, function (row, i) {
      row.addEventListener("click", function (event) {
        if (event.target.closest && event.target.closest("summary, a")) {
          if (event.target.closest("a")) { event.preventDefault(); } else { return; }
        }
        select(i, false);
      });
      row.addEventListener("keydown", function (event) {
        if (event.key === "Enter") { select(i, false); }
      });
    });
    var prev = section.querySelector(".stepper .prev");
    var next = section.querySelector(".stepper .next");
    if (prev) { prev.addEventListener("click", function () { select(current - 1, true); }); }
    if (next) { next.addEventListener("click", function () { select(current + 1, true); }); }
    var all = section.querySelector(".stepper .show-all-diffs");
    if (all) {
      all.addEventListener("change", function () { body.classList.toggle("show-all-diffs", all.checked); });
    }
    section.addEventListener("keydown", function (event) {
      if (event.target.tagName === "INPUT") { return; }
      if (event.key === "ArrowRight" || event.key === "ArrowDown") { select(current + 1, true); event.preventDefault(); }
      if (event.key === "ArrowLeft" || event.key === "ArrowUp") { select(current - 1, true); event.preventDefault(); }
    });
    // The page opens at the step where the property breaks (or the implementation parts); else at the first.
    var table = section.querySelector("table.steps");
    var breaks = table ? table.getAttribute("data-breaks") : null;
    var start = 0;
    for (var b = 0; breaks !== null && b < rows.length; b++) {
      if (rows[b].getAttribute("data-step") === breaks) { start = b; break; }
    }
    select(start, false);
    if (breaks !== null && !opened && rows[start].scrollIntoView) {
      opened = true;
      rows[start].scrollIntoView({block: "center"});
    }
    section.stepTo = function (step) {
      for (var i = 0; i < rows.length; i++) {
        if (rows[i].getAttribute("data-step") === String(step)) { select(i, true); return true; }
      }
      return false;
    };
  }

  var opened = false;  // the first trace with a breaking step scrolls into view when the page opens
  each(document.querySelectorAll("section.trace"), setup);

  var filter = document.getElementById("filter");
  var status = document.getElementById("filter-status");
  function applyFilter() {
    var wanted = filter.value.trim();
    var hidden = 0;
    each(document.querySelectorAll("[data-tokens]"), function (el) {
      var tokens = [];
      try { tokens = JSON.parse(el.getAttribute("data-tokens")) || []; } catch (e) { tokens = []; }
      var match = !wanted || tokens.indexOf(wanted) >= 0;
      if (el.classList.contains("step")) {
        el.classList.toggle("dim", !match && tokens.length > 0);
      } else if (!el.classList.contains("global")) {
        el.hidden = !match;
        if (!match) { hidden++; }
      }
    });
    if (status) { status.textContent = wanted ? hidden + " table rows of other projects and keys hidden" : ""; }
  }
  if (filter) {
    filter.addEventListener("input", applyFilter);
    filter.addEventListener("change", applyFilter);
  }
}());
