// The dashboard's only script of its own (htmx does the live refresh). No inline scripts: the
// Content-Security-Policy allows scripts from /static only.
(function () {
  "use strict";
  // While the operator has picked jobs, the live region is not refreshed under their hand.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var region = event.detail && event.detail.elt;
    if (region && region.id === "live" && region.querySelector("input.pick:checked")) {
      event.preventDefault();
    }
  });
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box.classList && box.classList.contains("pick-all")) {
      var form = box.closest("form");
      form.querySelectorAll("input.pick").forEach(function (pick) { pick.checked = box.checked; });
    }
  });
  // Each confirm-worthy action asks once.
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (button && button.classList.contains("warn")) {
      if (!window.confirm(button.textContent.trim() + "?")) { event.preventDefault(); }
    }
  });
})();
