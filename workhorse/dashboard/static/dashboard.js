// The dashboard's only script of its own (htmx swaps the live region in). No inline scripts: the
// Content-Security-Policy allows scripts from /static only.
(function () {
  "use strict";
  var KEY = "workhorse.refresh";

  // ---- the live refresh ---------------------------------------------------------------------
  // The page's live region (#live, data-live="on") is re-fetched at the pace the header's control
  // sets (kept in this browser), and never under the operator's hand: not while text is selected
  // in it, not while something in it has focus (a checkbox, a link, a button), not while jobs are
  // ticked, not while the tab is hidden. A region rendered with data-live="off" (a finished job,
  // a revealed payload) is never re-fetched.
  function seconds() {
    var body = document.body;
    var chosen = null;
    try { chosen = window.localStorage.getItem(KEY); } catch (e) { chosen = null; }
    var n = parseInt(chosen === null ? body.getAttribute("data-live-seconds") : chosen, 10);
    return isNaN(n) || n < 0 ? 2 : n;
  }

  function region() {
    return document.getElementById("live");
  }

  function held(live) {
    var selection = window.getSelection ? window.getSelection() : null;
    if (selection && !selection.isCollapsed && selection.rangeCount) {
      var range = selection.getRangeAt(0);
      if (live.contains(range.startContainer) || live.contains(range.endContainer)) {
        return "held while text is selected";
      }
    }
    var active = document.activeElement;
    if (active && active !== document.body && live.contains(active)) {
      return "held while you are on an element of the page";
    }
    if (live.querySelector("input.pick:checked")) {
      return "held while jobs are ticked";
    }
    return "";
  }

  function say(text) {
    var state = document.getElementById("refresh-state");
    if (state && state.textContent !== text) { state.textContent = text; }
  }

  var last = Date.now();
  function tick() {
    var live = region();
    var every = seconds();
    if (!live || live.getAttribute("data-live") !== "on") { say(live ? "finished: not refreshed" : ""); return; }
    if (every === 0) { say("paused"); return; }
    if (document.hidden || Date.now() - last < every * 1000) { return; }
    var why = held(live);
    say(why);
    if (why || !window.htmx) { return; }
    last = Date.now();
    window.htmx.trigger(live, "refresh");
  }

  document.addEventListener("DOMContentLoaded", function () {
    var control = document.getElementById("refresh-control");
    if (control) {
      var current = String(seconds());
      var known = Array.prototype.some.call(control.options, function (o) { return o.value === current; });
      control.value = known ? current : control.options[0].value;
      control.addEventListener("change", function () {
        try { window.localStorage.setItem(KEY, control.value); } catch (e) { /* private mode */ }
        last = 0;
        tick();
      });
    }
    window.setInterval(tick, 250);
  });
  // Never a refresh under the operator's hand, also one already asked for.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var live = event.detail && event.detail.elt;
    if (live && live.id === "live" && held(live)) { event.preventDefault(); }
  });

  // ---- picking jobs -------------------------------------------------------------------------
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box.classList && box.classList.contains("pick-all")) {
      var form = box.closest("form");
      form.querySelectorAll("input.pick").forEach(function (pick) { pick.checked = box.checked; });
    }
  });

  // ---- confirms: each names the queue or the number of jobs -----------------------------------
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (!button) { return; }
    var text = button.getAttribute("data-confirm");
    var picked = button.getAttribute("data-confirm-picked");
    if (picked) {
      var form = button.closest("form");
      var n = form ? form.querySelectorAll("input.pick:checked").length : 0;
      text = picked.replace("{n}", String(n));
    }
    if (text && !window.confirm(text)) { event.preventDefault(); }
  });
})();
