// Keeps a page current without a reload: asks for the page's version every few seconds
// and, when it changed, swaps in the new <main>.
(function () {
  "use strict";
  var main = document.querySelector("main[data-version]");
  if (!main) { return; }
  var status = document.getElementById("live");
  function poll() {
    fetch(main.dataset.versionUrl, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (body) {
        if (body.version === main.dataset.version) { return null; }
        return fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
          .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
          .then(function (html) {
            var fresh = new DOMParser().parseFromString(html, "text/html")
              .querySelector("main[data-version]");
            if (fresh) {
              main.innerHTML = fresh.innerHTML;
              main.dataset.version = fresh.dataset.version;
            }
          });
      })
      .then(function () { if (status) { status.textContent = "live"; } },
            function () { if (status) { status.textContent = "live: no answer, retrying"; } });
  }
  window.setInterval(poll, 2000);
})();
