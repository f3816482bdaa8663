// The validate page's behaviour: the grid's filters, a node's panel, the copy buttons. Every string from the record
// goes in through textContent, never as markup: host names, reasons and tool messages came from the nodes.
"use strict";
(function () {
  const STATUS_OF = {healthy: "PASS", degraded: "WARN", drain: "FAIL", unknown: "ERROR"};
  const cache = {};

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k === null || k === undefined ? "" : k);
    return e;
  }

  // The rows of every node, packed by bench (gzip, base64); unpacked once, on the first node opened.
  function data(prefix) {
    if (!cache[prefix]) {
      const text = document.getElementById(prefix + "-data").textContent.trim();
      const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      cache[prefix] = new Response(stream).text().then(JSON.parse);
    }
    return cache[prefix];
  }

  function table(head, rows) {
    const t = el("table", {}, el("tr", {}, ...head.map((h) => el("th", {}, h))));
    for (const r of rows) t.append(r);
    return t;
  }

  function rowOf(d, r, onlyBad) {
    const s = (i) => d.s[r[i]];
    const status = s(2);
    if (onlyBad && status === "PASS") return null;
    return el("tr", {"data-status": status}, el("td", {}, s(0)), el("td", {}, s(1)),
      el("td", {class: "status s-" + status}, status), el("td", {}, s(3)), el("td", {}, s(4)), el("td", {}, s(5)),
      el("td", {}, s(6)));
  }

  function fill(panel, prefix, host, d) {
    const n = d.nodes[host];
    panel.replaceChildren();
    const close = el("button", {type: "button"}, "close");
    close.addEventListener("click", () => { panel.hidden = true; history.replaceState(null, "", "#" + prefix + "-grid"); mark(prefix, null); });
    panel.append(el("h3", {}, host + ": ", el("span", {class: "badge s-" + (STATUS_OF[n.verdict] || "ERROR")}, n.verdict || "unknown"), " ", close));
    panel.append(el("p", {}, "action: " + (n.action || "")));
    if (n.not_checked.length) panel.append(el("p", {class: "note"}, "not checked: " + n.not_checked.join("; ")));
    if (n.best_pair) {
      panel.append(el("p", {}, "best pair: with " + n.best_pair.with + ", " + (n.best_pair.busbw / 1e9).toFixed(2) + " GB/s bus bandwidth"));
    }
    const only = el("input", {type: "checkbox"});
    const body = el("div");
    // What a person opened the node for first: its FAIL, ERROR and WARN rows, then the rest in the checks' order.
    const rank = {FAIL: 0, ERROR: 1, WARN: 2};
    const order = n.rows.map((i, k) => [rank[d.s[d.rows[i][2]]] ?? 3, k, i]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const draw = () => body.replaceChildren(table(["check", "node", "status", "figure", "reference", "reason", "action"],
      order.map(([, , i]) => rowOf(d, d.rows[i], only.checked)).filter((x) => x)));
    only.addEventListener("change", draw);
    panel.append(el("h4", {}, n.rows.length + " row(s) ", el("label", {class: "note"}, only, " only those not PASS")));
    draw();
    panel.append(body);
    if (n.health) {
      panel.append(el("h4", {}, "Health findings: " + n.health.findings.length));
      if (n.health.findings.length) {
        panel.append(table(["code", "severity", "GPU", "what", "meaning", "action"], n.health.findings.map((f) =>
          el("tr", {}, el("td", {}, f.code), el("td", {}, f.severity), el("td", {}, f.gpu_index === null ? "" : String(f.gpu_index)),
            el("td", {}, f.what), el("td", {}, f.meaning), el("td", {}, f.action)))));
      }
      const read = Object.entries(n.health.read).map(([k, v]) => k + ": " + v);
      panel.append(el("p", {class: "note"}, "read: " + (read.join("; ") || "nothing") +
        (n.health.not_read.length ? "; not read: " + n.health.not_read.join("; ") : "")));
    }
    if (n.burn) {
      panel.append(el("h4", {}, "Burn"), document.getElementById(n.burn).content.cloneNode(true));
    } else if (document.getElementById(prefix + "-burn")) {
      panel.append(el("p", {class: "note"}, "Burn: this node's curves are not drawn on the page (see the Burn section)."));
    }
  }

  function mark(prefix, host) {
    for (const c of document.querySelectorAll("#" + prefix + " .cell.open")) c.classList.remove("open");
    if (host === null) return;
    for (const c of document.querySelectorAll("#" + prefix + " .cell")) if (c.dataset.host === host) c.classList.add("open");
  }

  function open(prefix, host) {
    const panel = document.getElementById(prefix + "-panel");
    panel.hidden = false;
    panel.replaceChildren(el("p", {}, "opening " + host + "..."));
    mark(prefix, host);
    return data(prefix).then((d) => {
      if (!d.nodes[host]) { panel.replaceChildren(el("p", {}, host + ": not a node of this record")); return; }
      fill(panel, prefix, host, d);
      panel.dataset.host = host;
    }).catch((e) => panel.replaceChildren(el("p", {}, "cannot unpack the rows in this browser: " + e)));
  }

  function filter(section) {
    const form = section.querySelector(".filters");
    const verdicts = new Set([...form.querySelectorAll("input[name=verdict]:checked")].map((x) => x.value));
    const check = form.querySelector("select[name=check]").value;
    const q = form.querySelector("input[name=q]").value.trim().toLowerCase();
    let shown = 0, all = 0;
    for (const g of section.querySelectorAll("[data-group]")) {
      let any = false;
      for (const c of g.querySelectorAll(".cell")) {
        all++;
        const ok = verdicts.has(c.dataset.verdict) && (!check || c.dataset.bad.split(" ").includes(check)) &&
          (!q || c.dataset.host.toLowerCase().includes(q));
        c.hidden = !ok;
        if (ok) { shown++; any = true; }
      }
      g.hidden = !any;
    }
    form.querySelector("[data-shown]").textContent = shown + " of " + all + " node(s) shown";
  }

  function fromHash() {
    const m = /^#(v\d+)-node-(.+)$/.exec(decodeURIComponent(location.hash));
    if (m && document.getElementById(m[1] + "-panel")) open(m[1], m[2]);
  }

  for (const section of document.querySelectorAll("section.validate")) {
    const prefix = section.dataset.prefix;
    const form = section.querySelector(".filters");
    form.hidden = false;
    // "change" too: a select fires only that in some browsers (and under WebDriver).
    form.addEventListener("input", () => filter(section));
    form.addEventListener("change", () => filter(section));
    form.addEventListener("submit", (e) => e.preventDefault());
    filter(section);
    section.addEventListener("click", (e) => {
      const cell = e.target.closest(".cell");
      if (!cell) return;
      e.preventDefault();
      history.replaceState(null, "", "#" + prefix + "-node-" + cell.dataset.host);
      open(prefix, cell.dataset.host);
    });
  }
  for (const b of document.querySelectorAll("button[data-copy]")) {
    b.addEventListener("click", () => {
      const text = document.getElementById(b.dataset.copy).textContent;
      const done = () => { b.textContent = "copied"; setTimeout(() => { b.textContent = "copy"; }, 1500); };
      if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, () => select(b.dataset.copy));
      else select(b.dataset.copy);
    });
  }
  function select(id) {
    const range = document.createRange();
    range.selectNodeContents(document.getElementById(id));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
