// The sandbox page's live terminal: xterm.js bridged to /ui/sandboxes/<id>/terminal.
// Input and resizes go up as JSON text frames; the PTY's bytes come down as binary frames.
(function () {
  "use strict";
  function start() {
    var box = document.getElementById("terminal");
    var status = document.getElementById("terminal-status");
    if (!box) return;
    if (typeof Terminal === "undefined") {
      status.textContent = "The terminal's assets are not installed (run scripts/console-assets).";
      return;
    }
    var term = new Terminal({ cursorBlink: true, fontSize: 14, convertEol: false });
    var fit = typeof FitAddon !== "undefined" ? new FitAddon.FitAddon() : null;
    if (fit) term.loadAddon(fit);
    term.open(box);
    if (fit) fit.fit();
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + location.host + "/ui/sandboxes/" + encodeURIComponent(box.dataset.sandbox) +
      "/terminal?cols=" + term.cols + "&rows=" + term.rows;
    var ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    ws.onopen = function () {
      status.textContent = "Connected.";
      box.dataset.connected = "1";
      // Take the keyboard only if nothing else has it: keys meant for a field the user is
      // typing in (the timeout, a path) must never run as shell input.
      var active = document.activeElement;
      if (!active || active === document.body) term.focus();
    };
    ws.onmessage = function (event) { term.write(new Uint8Array(event.data)); };
    ws.onclose = function (event) {
      status.textContent = "Disconnected" + (event.reason ? ": " + event.reason : ".");
      delete box.dataset.connected;
    };
    term.onData(function (data) {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "input", data: data }));
    });
    term.onResize(function (size) {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols: size.cols, rows: size.rows }));
    });
    window.addEventListener("resize", function () { if (fit) fit.fit(); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
