// qkv's evidence explorer: the page's script (inlined into every page).
// It only displays: every number, label and derivation arrives computed in the
// page's JSON block (#qkv-data); nothing here does arithmetic on the evidence.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("qkv-data").textContent);
  var panel = document.getElementById("qkv-panel");
  var body = document.getElementById("qkv-panel-body");
  var opened = null;
  var PART = { t: "term", r: "rest", f: "fact", x: "text" };

  // every number is focusable and announced as a control; a glyph cell's value is its tooltip
  document.querySelectorAll("[data-tensor]").forEach(function (element) {
    element.tabIndex = 0;
    element.setAttribute("role", "button");
    if (element.closest(".grid")) { element.title = element.textContent; }
  });

  function cell(row, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) { td.className = cls; }
    row.appendChild(td);
    return td;
  }

  function para(text, cls) {
    var p = document.createElement("p");
    p.textContent = text;
    if (cls) { p.className = cls; }
    body.appendChild(p);
  }

  function show(element) {
    var tensor = element.getAttribute("data-tensor");
    var index = element.getAttribute("data-index");
    var variant = element.getAttribute("data-variant");
    var stat = element.getAttribute("data-stat");
    var key = tensor + "|" + index + (variant ? "|" + variant : "") +
      (stat && !index ? "|" + stat : "");
    // a large tensor's values share one panel: its stage's element formula
    var found = data.derivations[key] || data.derivations[tensor + "|*"];
    body.textContent = "";
    var heading = document.createElement("h2");
    heading.textContent = (found && found.h) ||
      (tensor + (index ? "[" + index + "]" : "") + (stat ? " (" + stat + ")" : "") +
       (variant ? " (" + variant.replace("-", " ") + ")" : ""));
    body.appendChild(heading);
    para("shown: " + element.textContent);
    if (!found) {
      para(data.given.indexOf(tensor) >= 0
        ? "given by the fixture: an input of the computation, not made from other numbers."
        : "this page holds no terms for it.");
    } else {
      if (found.g !== undefined) { para(data.labels[found.g], "stage"); }
      para(data.labels[found.f], "formula");
      var table = document.createElement("table");
      var summing = found.s !== 0;
      var usual = summing ? "t" : "f";
      var terms = 0;
      function line(r) {
        var tr = document.createElement("tr");
        var part = PART[r[2] || usual];
        tr.className = part;
        var adds = summing && (part === "term" || part === "rest");
        cell(tr, adds ? (terms++ === 0 ? " " : "+") : "", "op");
        var label = cell(tr, data.labels[r[0]]);
        if (r[3]) {  // the operand values a product multiplies
          var ops = document.createElement("span");
          ops.className = "ops";
          ops.textContent = "  " + r[3];
          label.appendChild(ops);
        }
        cell(tr, r[1], "value");
        table.appendChild(tr);
      }
      function adds(r) { return summing && "tr".indexOf(r[2] || usual) >= 0; }
      // a sum: its terms, then the value; the facts beside it follow
      found.r.filter(adds).forEach(line);
      var total = document.createElement("tr");
      total.className = "total";
      cell(total, "=", "op");
      // several numbers of one coordinate (analytic, numerical, scaled error; actual,
      // expected) share a panel: it ends on the number clicked, by its field's name
      var field = element.getAttribute("data-field");
      cell(total, field ? "the " + field.replace("_", " ") + " (clicked)" :
        summing ? "the value (the sum of the terms)" : "the value");
      cell(total, field || found.v === undefined ? element.textContent : found.v, "value");
      if (summing) { table.appendChild(total); }
      found.r.filter(function (r) { return !adds(r); }).forEach(line);
      if (!summing) { table.appendChild(total); }
      body.appendChild(table);
    }
    if (opened) { opened.classList.remove("open"); }
    opened = element;
    element.classList.add("open");
    panel.hidden = false;
    uncover(element);
  }

  // the panel never hides the number it explains: room below the page, and the number
  // scrolled above the panel when the panel would cover it
  function uncover(element) {
    document.body.style.paddingBottom = (panel.offsetHeight + 24) + "px";
    var top = panel.getBoundingClientRect().top;
    var rect = element.getBoundingClientRect();
    if (rect.bottom > top - 8) { window.scrollBy(0, rect.bottom - top + 16); }
  }

  function close() {
    panel.hidden = true;
    document.body.style.paddingBottom = "";
    if (opened) {
      opened.classList.remove("open");
      opened.focus();
      opened = null;
    }
  }

  function number(target) {
    return target && target.closest ? target.closest("[data-tensor]") : null;
  }

  document.addEventListener("click", function (event) {
    var element = number(event.target);
    if (element && !panel.contains(element)) { show(element); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && !panel.hidden) { close(); event.preventDefault(); return; }
    if (event.key === "Enter" || event.key === " ") {
      var element = number(event.target);
      if (element) { show(element); event.preventDefault(); }
    }
  });
  panel.querySelector(".close").addEventListener("click", close);

  // switches: batch item, head, causal mask; the heat maps' scale
  var chosen = {};
  function apply() {
    ["batch", "head", "causal"].forEach(function (axis) {
      if (!(axis in chosen)) { return; }
      document.querySelectorAll("[data-" + axis + "]").forEach(function (el) {
        if (el.hasAttribute("data-switch")) { return; }
        el.hidden = el.getAttribute("data-" + axis) !== chosen[axis];
      });
    });
  }
  document.querySelectorAll("[data-switch]").forEach(function (select) {
    chosen[select.getAttribute("data-switch")] = select.value;
    select.addEventListener("change", function () {
      chosen[select.getAttribute("data-switch")] = select.value;
      apply();
    });
  });
  apply();
  document.querySelectorAll("input[name=qkv-scale]").forEach(function (radio) {
    radio.addEventListener("change", function () {
      if (radio.checked) { document.body.setAttribute("data-scale", radio.value); }
    });
  });
}());
