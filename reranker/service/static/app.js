// sdr-search "more like this" page. Plain JavaScript, no build step, no third-party code: every
// number it shows comes from the HTTP API under ../v1/ (the same answers `sdr mlt --json` gives).
//
// API key: typed into the page, kept in this tab's sessionStorage (gone when the tab closes) and
// sent as the X-API-Key header of every API call; the page's own files need none.
// Offsets: every highlight is placed by the character offsets the API returns (a sentence's
// [start, end) in the stored text of GET .../documents/{id}, or in the text the page sent).
"use strict";

const KEY_STORE = "sdr-search.api-key";
const INDEX_STORE = "sdr-search.index";
const SIGNALS = ["bm25", "sdr", "mean"];
// viridis, 9 stops: dark (low N) to yellow (high N)
const STOPS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141], [39, 173, 129],
  [92, 200, 99], [170, 220, 50], [253, 231, 37]];

const $ = (sel) => document.querySelector(sel);
const state = { key: "", index: "", likes: [], unlikes: [], last: null, view: null };

class ApiError extends Error {
  constructor(status, type, message, retryAfter) {
    super(message);
    this.status = status;
    this.type = type;
    this.retryAfter = retryAfter || null;
  }
}

function storage() {
  try { return window.sessionStorage; } catch (e) { return null; }  // storage can be switched off
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

const fmt = (x, digits = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
const signed = (x, digits = 3) => (x >= 0 ? "+" : "−") + Math.abs(x).toFixed(digits);
const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + "…" : s);

// -- the API --------------------------------------------------------------------------------------
async function api(path, options = {}) {
  const headers = { Accept: "application/json" };
  if (state.key) headers["X-API-Key"] = state.key;
  let body;
  if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  let response;
  try {
    response = await fetch(path, { method: body === undefined ? "GET" : "POST", headers, body });
  } catch (e) {
    throw new ApiError(0, "NetworkError", `the server cannot be reached (${e.message})`);
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!response.ok) {
    const err = data && data.error ? data.error : { type: `HTTP ${response.status}`, message: text.slice(0, 400) || response.statusText };
    throw new ApiError(response.status, err.type, err.message, response.headers.get("Retry-After"));
  }
  return data;
}

const indexPath = () => `../v1/indices/${encodeURIComponent(state.index)}`;
const mltPath = () => `${indexPath()}/more_like_this`;
const docPath = (id) => `${indexPath()}/documents/${encodeURIComponent(id)}`;

function showError(err) {
  $("#error-status").textContent = err.status ? `${err.status} ${err.type}` : (err.type || "Error");
  $("#error-message").textContent = err.message + (err.retryAfter ? ` (retry after ${err.retryAfter} s)` : "");
  $("#error").hidden = false;
  if (err.status === 401) $("#api-key").focus();
}

function clearError() { $("#error").hidden = true; }

function setBusy(busy) {
  document.body.classList.toggle("busy", busy);
  document.body.dataset.busy = busy ? "1" : "0";
  $("#search").disabled = busy;
}

// -- the key and the index -----------------------------------------------------------------------
async function loadIndices() {
  const select = $("#index");
  try {
    const data = await api("../v1/indices");
    const saved = storage() ? storage().getItem(INDEX_STORE) : null;
    select.replaceChildren(...data.indices.map((name) => el("option", { value: name, text: name })));
    state.index = data.indices.includes(saved) ? saved : (data.indices[0] || "");
    select.value = state.index;
    $("#key-state").textContent = state.key ? "key in use" : "";
    clearError();
    document.body.dataset.ready = "1";
  } catch (e) {
    select.replaceChildren();
    state.index = "";
    showError(e);
  }
}

function useKey(key) {
  state.key = key;
  const s = storage();
  if (s) { if (key) s.setItem(KEY_STORE, key); else s.removeItem(KEY_STORE); }
  $("#api-key").value = "";
  $("#key-state").textContent = key ? "key in use" : "";
  return loadIndices();
}

// -- the source picker: an id, or words (GET .../_find) --------------------------------------------
let findTimer = null;
let findSeq = 0;

function hideSuggestions() { $("#suggestions").hidden = true; }

async function suggest() {
  const q = $("#source-id").value.trim();
  const list = $("#suggestions");
  if (!q || !state.index) { hideSuggestions(); return; }
  const seq = ++findSeq;
  try {
    const data = await api(`${indexPath()}/_find?` + new URLSearchParams({ q, size: "8" }));
    if (seq !== findSeq) return;
    list.replaceChildren(...data.hits.map((h) => el("li", {
      role: "option", dataset: { id: h.id },
      onmousedown: (ev) => { ev.preventDefault(); choose(h.id); },
    }, el("span", { text: h.title || h.id }), el("span", { class: "sid", text: h.match === "id" ? `id ${h.id}` : h.id }))));
    list.hidden = data.hits.length === 0;
    document.body.dataset.suggested = String(seq);
  } catch (e) {
    if (seq === findSeq) showError(e);
  }
}

function choose(id) {
  $("#source-id").value = id;
  hideSuggestions();
}

function kind() { return document.querySelector("input[name=kind]:checked").value; }

// -- the query -------------------------------------------------------------------------------------
function sourceItem() {
  if (kind() === "id") {
    const id = $("#source-id").value.trim();
    if (!id) throw new ApiError(0, "Input", "give a source: an id, or choose a document from the suggestions");
    return { id };
  }
  const text = $("#source-text").value;
  if (!text.trim()) throw new ApiError(0, "Input", "paste the text of a document");
  const title = $("#source-title").value.trim();
  return title ? { text, title } : { text };
}

function queryBody() {
  const source = sourceItem();
  const body = {};
  if (state.likes.length || state.unlikes.length) {
    body.like = [source, ...state.likes];
    if (state.unlikes.length) body.unlike = [...state.unlikes];
  } else {
    Object.assign(body, source);
  }
  if ($("#method").value) body.method = $("#method").value;
  const size = $("#size").value.trim();
  body.size = size === "" ? 10 : Number(size);
  const filter = $("#filter").value.trim();
  if (filter) {
    try { body.filter = JSON.parse(filter); } catch (e) {
      throw new ApiError(0, "Input", `filter: not JSON (${e.message})`);
    }
  }
  body.explain = true;
  return body;
}

async function search() {
  clearError();
  clearTimeout(findTimer);  // a title search typed just before is not wanted any more
  findSeq++;
  hideSuggestions();
  let body;
  try { body = queryBody(); } catch (e) { showError(e); return; }
  setBusy(true);
  try {
    const data = await api(mltPath(), { body });
    state.last = { body, data };
    renderHits(data);
    document.body.dataset.searched = String(Number(document.body.dataset.searched || 0) + 1);
  } catch (e) {  // the hits of an earlier search are not left under a failed one
    state.last = null;
    $("#hits").replaceChildren();
    $("#summary").textContent = "No hits: the search failed (above).";
    showError(e);
  } finally {
    setBusy(false);
  }
}

function like(id, role) {
  const [into, from] = role === "like" ? [state.likes, state.unlikes] : [state.unlikes, state.likes];
  if (!into.includes(id)) into.push(id);
  const at = from.indexOf(id);
  if (at >= 0) from.splice(at, 1);
  renderChips();
  return search();
}

function drop(id) {
  state.likes = state.likes.filter((x) => x !== id);
  state.unlikes = state.unlikes.filter((x) => x !== id);
  renderChips();
  return search();
}

function renderChips() {
  const chip = (id, cls) => el("span", { class: `chip ${cls}`, dataset: { id } }, id,
    el("button", { type: "button", title: `remove ${id}`, "aria-label": `remove ${id}`, text: "×", onclick: () => drop(id) }));
  $("#likes").replaceChildren(...state.likes.map((id) => chip(id, "like")));
  $("#unlikes").replaceChildren(...state.unlikes.map((id) => chip(id, "unlike")));
  $("#also").hidden = !state.likes.length && !state.unlikes.length;
}

// -- the hits --------------------------------------------------------------------------------------
function renderHits(data) {
  const fusion = data.hybrid ? ` (${data.hybrid.fusion})` : "";
  const weights = data.hybrid && data.hybrid.weights_applied
    ? " · weights " + SIGNALS.map((s) => `${s} ${fmt(data.hybrid.weights_applied[s], 2)}`).join(", ") : "";
  const feedback = data.hybrid && data.hybrid.feedback ? ` · document feedback from ${data.hybrid.feedback.ids.join(", ")}` : "";
  const stale = data.stats.stale ? " · statistics stale (sdr stats)" : "";
  $("#summary").textContent = `${data.hits.length} hits · method ${data.method}${fusion}${weights}${feedback} · `
    + `${data.candidates} candidates ranked exactly${stale}`;
  $("#hits").replaceChildren(...data.hits.map((hit, rank) => renderHit(hit, rank, data)));
}

function renderHit(hit, rank, data) {
  const meta = hit.metadata && Object.keys(hit.metadata).length
    ? el("div", { class: "meta", text: Object.entries(hit.metadata).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join(" · ") }) : null;
  const sn = hit.snippet;
  const snippet = sn ? el("blockquote", { class: "snippet" },
    sn.source !== undefined && sn.source !== null ? el("span", { class: "muted", text: `like[${sn.source}] ` }) : null,
    el("span", { class: "src", text: sn.source_sentence }), " ~ ", el("span", { class: "cand", text: sn.candidate_sentence }),
    el("span", { class: "muted", text: ` cos ${fmt(sn.cosine)}` })) : null;
  return el("li", { class: "hit", dataset: { id: hit.id, rank: String(rank) } },
    el("span", { class: "rank", text: String(rank + 1) }),
    el("div", { class: "hit-body" }, el("div", { class: "hit-head" },
      el("button", { type: "button", class: "link open-title", text: hit.title || hit.id, onclick: () => openHit(rank) }),
      el("code", { text: hit.id }),
      el("span", { class: "score", title: "the hit's score", text: fmt(hit.score, 4) })),
    meta,
    renderSignals(hit, data),
    snippet,
    el("div", { class: "actions" },
      el("button", { type: "button", class: "open", onclick: () => openHit(rank) }, "Open"),
      el("button", { type: "button", class: "like", title: "add as a further source", onclick: () => like(hit.id, "like") }, "Like"),
      el("button", { type: "button", class: "unlike", title: "rank again, away from this one", onclick: () => like(hit.id, "unlike") }, "Unlike"))));
}

function renderSignals(hit, data) {
  const signals = hit.explanation && hit.explanation.hybrid ? hit.explanation.hybrid.signals : null;
  if (!signals) {
    const sdr = hit.explanation ? ` · S(s, c) ${fmt(hit.explanation.score)}` : "";
    return el("div", { class: "signals muted", text: `exact SDR score${sdr}` });
  }
  // each signal's part of the fused score: weight x normalised (over the weights' sum, but for rrf)
  const total = data.hybrid && data.hybrid.fusion === "rrf" ? 1 : SIGNALS.reduce((a, s) => a + (signals[s] ? signals[s].weight : 0), 0) || 1;
  const parts = SIGNALS.map((s) => {
    const v = signals[s];
    return v && v.normalised !== null && v.normalised !== undefined ? (v.weight * v.normalised) / total : 0;
  });
  const most = Math.max(...parts.map(Math.abs), 1e-12);
  return el("div", { class: "signals", title: "each signal's part of the score: weight × normalised score" },
    ...SIGNALS.map((s, k) => {
      const v = signals[s] || {};
      const fill = el("span", { class: parts[k] < 0 ? "fill neg" : "fill" });
      fill.style.width = `${(100 * Math.abs(parts[k])) / most}%`;
      return el("span", { class: "signal", dataset: { signal: s, part: String(parts[k]) },
        title: `${s}: raw ${fmt(v.raw, 4)}, normalised ${fmt(v.normalised, 4)}, weight ${fmt(v.weight, 4)}` },
      s, el("span", { class: "track" }, fill), signed(parts[k]));
    }));
}

// -- a hit opened beside the source ------------------------------------------------------------------
async function sourceTexts(body) {
  // each like source (or the one source) as {label, text, title}: stored ones read from the API, new text as sent
  const items = body.like ? body.like : [body];
  return Promise.all(items.map(async (item, k) => {
    const id = typeof item === "string" || typeof item === "number" ? String(item) : item.id;
    const label = body.like ? `like[${k}] ` : "";
    if (id !== undefined && id !== null) {
      const doc = await api(docPath(id));
      return { label: `${label}${doc.title || doc.id}`, id: doc.id, text: doc.text, title: doc.title };
    }
    return { label: `${label}${item.title || "new text"}`, id: null, text: item.text, title: null };
  }));
}

const nextPaint = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));

async function openHit(rank) {
  const last = state.last;
  const listed = last.data.hits[rank];
  clearError();
  setBusy(true);
  const t0 = performance.now();
  try {
    const body = { ...last.body, from: rank, size: 1, explain: true, explain_matrix: true };
    const [data, hitDoc, sources] = await Promise.all([api(mltPath(), { body }), api(docPath(listed.id)), sourceTexts(last.body)]);
    const hit = data.hits[0];
    if (!hit || hit.id !== listed.id) {
      throw new ApiError(0, "RankingChanged", `the ranking changed since the search: rank ${rank + 1} is now `
        + `${hit ? hit.id : "empty"}, not ${listed.id}; search again`);
    }
    if (!hit.explanation || !hit.explanation.matrix) {  // deleted between its scoring and its reading
      throw new ApiError(0, "DocumentGone", `${listed.id} was deleted or replaced during the request; search again`);
    }
    const t1 = performance.now();
    renderCompare({ hit, rank, hitDoc, sources, response: data });
    await nextPaint();
    const t2 = performance.now();
    document.body.dataset.openMs = (t2 - t0).toFixed(1);
    document.body.dataset.renderMs = (t2 - t1).toFixed(1);
    $("#compare-timing").textContent = `opened in ${Math.round(t2 - t0)} ms, of which drawing ${Math.round(t2 - t1)} ms`;
    document.body.dataset.opened = listed.id;
  } catch (e) {
    showError(e);
  } finally {
    setBusy(false);
  }
}

function showView(name) {
  $("#search-view").hidden = name !== "search";
  $("#compare-view").hidden = name !== "compare";
}

function paragraphSpan(sentences) {
  const placed = sentences.filter((s) => s);
  return placed.length ? [placed[0][0], placed[placed.length - 1][1]] : null;
}

function colour(t) {
  const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
  const k = Math.min(STOPS.length - 2, Math.floor(x));
  const f = x - k;
  return STOPS[k].map((c, i) => Math.round(c + f * (STOPS[k + 1][i] - c)));
}

function paragraphEl(text, span, label, data, charsPerLine) {
  if (!span) return el("p", { class: "para unplaced", dataset: { ...data, label } }, "(this paragraph's sentences are not in the text verbatim)");
  const p = el("p", { class: "para", dataset: { ...data, label, start: String(span[0]), end: String(span[1]) } }, text.slice(span[0], span[1]));
  // its height until drawn (content-visibility: auto), from its length: scrolling to a paragraph far down lands close
  p.style.containIntrinsicSize = `auto ${Math.ceil((span[1] - span[0]) / charsPerLine) * 20 + 12}px`;
  p.sdrText = text.slice(span[0], span[1]);
  p.sdrStart = span[0];
  return p;
}

function renderCompare(view) {
  const { hit, rank, hitDoc, sources } = view;
  const ex = hit.explanation;
  const mx = ex.matrix;
  const n = mx.rows.length;
  const m = mx.columns.length;
  let lo = Infinity;
  let hi = -Infinity;
  for (const row of mx.normalised) for (const v of row) { if (v < lo) lo = v; if (v > hi) hi = v; }
  if (!(hi > lo)) hi = lo + 1;
  view.lo = lo;
  view.hi = hi;
  view.mx = mx;
  view.ex = ex;
  view.sel = null;
  view.marked = [];
  state.view = view;
  const tint = (v) => `rgb(${colour((v - lo) / (hi - lo)).join(",")})`;

  // the source: each like source's paragraphs (rows), placed by their sentences' offsets
  showView("compare");  // laid out, so the panes' widths are known
  const sourcePane = $("#source-doc");
  const perLine = (pane) => Math.max(20, Math.floor((pane.clientWidth - 50) / 7.2));  // 14px text: about 7 px a character
  const srcPerLine = perLine(sourcePane);
  const hitPerLine = perLine($("#hit-doc"));
  const parts = [];
  view.rowEls = new Array(n);
  let shown = -1;
  mx.rows.forEach((row, i) => {
    const k = row.source === undefined || row.source === null ? 0 : row.source;
    const src = sources[k];
    if (k !== shown) {
      shown = k;
      if (sources.length > 1) parts.push(el("div", { class: "source-title", text: src.label }));
      if (src.title) parts.push(el("p", { class: "title", text: src.title }));
    }
    const p = paragraphEl(src.text, paragraphSpan(row.sentences), `¶${row.paragraph}`, { row: String(i), source: String(k) },
      srcPerLine);
    p.style.borderLeftColor = tint(Math.max(...mx.normalised[i]));
    p.addEventListener("click", () => selectCell(i, argmax(mx.normalised[i])));
    view.rowEls[i] = p;
    parts.push(p);
  });
  sourcePane.replaceChildren(...parts);
  $("#source-head").textContent = sources.length > 1 ? `Sources (${sources.length} like)` : `Source: ${sources[0].label}`;

  // the hit: its stored text, paragraph by paragraph
  const hitParts = hitDoc.title ? [el("p", { class: "title", text: hitDoc.title })] : [];
  view.colEls = mx.columns.map((col, j) => {
    let best = -Infinity;
    for (let i = 0; i < n; i++) best = Math.max(best, mx.normalised[i][j]);
    const p = paragraphEl(hitDoc.text, paragraphSpan(col.sentences), `¶${j}`, { col: String(j) }, hitPerLine);
    p.style.borderLeftColor = tint(best);
    p.addEventListener("click", () => selectCell(argmaxColumn(mx.normalised, j), j));
    hitParts.push(p);
    return p;
  });
  $("#hit-doc").replaceChildren(...hitParts);
  view.texts = { sources, hit: hitDoc.text };
  $("#hit-head").textContent = `Hit #${rank + 1}: ${hitDoc.title || hitDoc.id}`;
  $("#compare-title").textContent = `${hitDoc.title || hitDoc.id} · score ${fmt(hit.score, 4)} · S(s, c) ${fmt(ex.score)}`
    + ` · ${n} × ${m} paragraph pairs`;

  // the best pairs, as the explanation lists them
  view.best = ex.paragraph_pairs.map((pair) => ({ pair, row: rowOf(mx, pair) }));
  $("#pairs").replaceChildren(...view.best.map(({ pair, row }, b) => el("li", { dataset: { pair: String(b) } },
    el("button", { type: "button", class: "link", onclick: () => selectCell(row, pair.candidate_paragraph) },
      `${pair.source !== undefined && pair.source !== null ? `like[${pair.source}] ` : ""}¶${pair.source_paragraph} ~ ¶${pair.candidate_paragraph}`
      + ` · N ${fmt(pair.normalised_score)} · P ${fmt(pair.paragraph_score)}`),
    el("ul", {}, ...pair.sentence_pairs.map((sp, s) => el("li", {},
      el("button", { type: "button", class: "sentence-pair", dataset: { pair: String(b), sentence: String(s) },
        onclick: () => selectCell(row, pair.candidate_paragraph, sp) },
      `cos ${fmt(sp.cosine)} · “${clip(sp.source_sentence, 70)}” ~ “${clip(sp.candidate_sentence, 70)}”`)))))));

  drawHeat(view);
  $("#source-doc").scrollTop = 0;
  $("#hit-doc").scrollTop = 0;
  if (view.best.length) selectCell(view.best[0].row, view.best[0].pair.candidate_paragraph);
}

function argmax(values) {
  let best = 0;
  for (let k = 1; k < values.length; k++) if (values[k] > values[best]) best = k;
  return best;
}

function argmaxColumn(matrix, j) {
  let best = 0;
  for (let i = 1; i < matrix.length; i++) if (matrix[i][j] > matrix[best][j]) best = i;
  return best;
}

function rowOf(mx, pair) {
  const source = pair.source === undefined || pair.source === null ? null : pair.source;
  return mx.rows.findIndex((r) => r.paragraph === pair.source_paragraph && (r.source === undefined || r.source === null ? null : r.source) === source);
}

// -- the heat map ------------------------------------------------------------------------------------
function drawHeat(view) {
  const { mx, lo, hi } = view;
  const n = mx.rows.length;
  const m = mx.columns.length;
  const cell = Math.max(1, Math.min(56, Math.floor(400 / Math.max(n, m))));
  const canvas = $("#heat");
  canvas.width = m * cell;
  canvas.height = n * cell;
  canvas.dataset.rows = String(n);
  canvas.dataset.columns = String(m);
  canvas.dataset.cell = String(cell);
  canvas.setAttribute("aria-label", `Heat map of ${n} source paragraphs by ${m} hit paragraphs`);
  const pixels = document.createElement("canvas");
  pixels.width = m;
  pixels.height = n;
  const pctx = pixels.getContext("2d");
  const image = pctx.createImageData(m, n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < m; j++) {
      const [r, g, b] = colour((mx.normalised[i][j] - lo) / (hi - lo));
      const at = 4 * (i * m + j);
      image.data[at] = r; image.data[at + 1] = g; image.data[at + 2] = b; image.data[at + 3] = 255;
    }
  }
  pctx.putImageData(image, 0, 0);
  const base = document.createElement("canvas");
  base.width = canvas.width;
  base.height = canvas.height;
  const ctx = base.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(pixels, 0, 0, m * cell, n * cell);
  if (cell >= 8) {  // cell borders, where cells are large enough to tell apart
    ctx.strokeStyle = "rgba(255,255,255,0.55)";
    ctx.lineWidth = 1;
    for (let j = 1; j < m; j++) { ctx.beginPath(); ctx.moveTo(j * cell + 0.5, 0); ctx.lineTo(j * cell + 0.5, n * cell); ctx.stroke(); }
    for (let i = 1; i < n; i++) { ctx.beginPath(); ctx.moveTo(0, i * cell + 0.5); ctx.lineTo(m * cell, i * cell + 0.5); ctx.stroke(); }
  }
  if (cell >= 36) {  // the values themselves, where they fit
    ctx.font = "11px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < m; j++) {
        const t = (mx.normalised[i][j] - lo) / (hi - lo);
        ctx.fillStyle = t > 0.6 ? "#111111" : "#ffffff";
        ctx.fillText(fmt(mx.normalised[i][j], 2), (j + 0.5) * cell, (i + 0.5) * cell);
      }
    }
  }
  for (const { pair, row } of view.best) {  // the explanation's best pairs
    const pad = cell >= 6 ? 1 : 2;
    ctx.lineWidth = cell >= 6 ? 2 : 1;
    ctx.strokeStyle = "#ffffff";
    ctx.strokeRect(pair.candidate_paragraph * cell - pad + 0.5, row * cell - pad + 0.5, cell + 2 * pad - 1, cell + 2 * pad - 1);
    ctx.strokeStyle = "#111111";
    ctx.strokeRect(pair.candidate_paragraph * cell - pad - 0.5, row * cell - pad - 0.5, cell + 2 * pad + 1, cell + 2 * pad + 1);
  }
  view.base = base;
  view.cell = cell;
  paintHeat(view);

  const legend = $("#legend");
  const lctx = legend.getContext("2d");
  for (let x = 0; x < legend.width; x++) {
    lctx.fillStyle = `rgb(${colour(x / (legend.width - 1)).join(",")})`;
    lctx.fillRect(x, 0, 1, legend.height);
  }
  $("#legend-min").textContent = `N ${fmt(lo, 2)}`;
  $("#legend-max").textContent = fmt(hi, 2);
}

function paintHeat(view) {
  const canvas = $("#heat");
  const ctx = canvas.getContext("2d");
  ctx.drawImage(view.base, 0, 0);
  if (view.sel) {
    const { i, j } = view.sel;
    const c = view.cell;
    ctx.lineWidth = 2;
    ctx.strokeStyle = "#e8175d";
    ctx.strokeRect(j * c - 2, i * c - 2, c + 4, c + 4);
  }
}

function cellAt(ev) {
  const canvas = $("#heat");
  const box = canvas.getBoundingClientRect();
  const x = ((ev.clientX - box.left) * canvas.width) / box.width;
  const y = ((ev.clientY - box.top) * canvas.height) / box.height;
  const view = state.view;
  const i = Math.floor(y / view.cell);
  const j = Math.floor(x / view.cell);
  return i >= 0 && j >= 0 && i < view.mx.rows.length && j < view.mx.columns.length ? { i, j } : null;
}

// -- a cell or a sentence pair: both documents scrolled to the sentences, highlighted by offsets -------
function unmark(view) {
  for (const p of view.marked) {
    p.classList.remove("active");
    if (p.sdrText !== undefined) p.textContent = p.sdrText;
  }
  view.marked = [];
}

function mark(view, p, span, cls) {
  p.classList.add("active");
  view.marked.push(p);
  if (!span || p.sdrText === undefined) return null;
  const a = span[0] - p.sdrStart;
  const b = span[1] - p.sdrStart;
  if (a < 0 || b > p.sdrText.length || a >= b) return null;  // not in this paragraph: the paragraph alone
  const m = el("mark", { class: cls, dataset: { start: String(span[0]), end: String(span[1]) } }, p.sdrText.slice(a, b));
  p.replaceChildren(p.sdrText.slice(0, a), m, p.sdrText.slice(b));
  return m;
}

function scrollPane(pane, target) {
  // Paragraphs off screen are not laid out (content-visibility: auto): the target's place is first known
  // from the others' estimated heights, and is set again over the next frames as they are drawn.
  if (!target) return;
  const token = {};
  pane.sdrScroll = token;
  const place = () => {
    const top = target.getBoundingClientRect().top - pane.getBoundingClientRect().top + pane.scrollTop;
    const want = Math.max(0, Math.round(top - pane.clientHeight / 3));
    const moved = Math.abs(pane.scrollTop - want) > 1;
    pane.scrollTop = want;
    return moved;
  };
  place();
  let frames = 0;
  const again = () => {
    if (pane.sdrScroll !== token) return;  // another selection since
    if (place() && ++frames < 8) requestAnimationFrame(again);
    else if (pane.sdrScroll === token) pane.dataset.settled = String(Number(pane.dataset.settled || 0) + 1);
  };
  requestAnimationFrame(again);
}

function selectCell(i, j, sentencePair) {
  const t0 = performance.now();
  const view = state.view;
  const { mx } = view;
  view.sel = { i, j };
  paintHeat(view);
  unmark(view);
  const row = mx.rows[i];
  let srcSpan;
  let hitSpan;
  let cosine;
  if (sentencePair) {  // one of the explanation's sentence pairs: its own offsets
    srcSpan = sentencePair.source_start !== undefined ? [sentencePair.source_start, sentencePair.source_end] : null;
    hitSpan = [sentencePair.candidate_start, sentencePair.candidate_end];
    cosine = sentencePair.cosine;
  } else {  // the cell's best sentence pair, from the matrix
    const [k, r, c] = mx.sentence_pairs[i][j];
    srcSpan = row.sentences[k];
    hitSpan = mx.columns[j].sentences[r];
    cosine = c;
  }
  const srcMark = mark(view, view.rowEls[i], srcSpan, "src");
  const hitMark = mark(view, view.colEls[j], hitSpan, "hit");
  scrollPane($("#source-doc"), srcMark || view.rowEls[i]);
  scrollPane($("#hit-doc"), hitMark || view.colEls[j]);
  const k = row.source === undefined || row.source === null ? 0 : row.source;
  const srcText = srcSpan ? view.texts.sources[k].text.slice(srcSpan[0], srcSpan[1]) : "(not found verbatim in the text)";
  const hitText = view.texts.hit.slice(hitSpan[0], hitSpan[1]);
  const N = mx.normalised[i][j];
  const P = row.mu + row.sigma * N;
  const best = Math.max(...mx.normalised[i]);
  const detail = $("#cell");
  detail.dataset.row = String(i);
  detail.dataset.col = String(j);
  detail.dataset.normalised = String(N);
  detail.replaceChildren(
    el("div", {}, el("b", { text: `${sources(view, row)}¶${row.paragraph} × hit ¶${j}` }),
      ` · N = ${fmt(N)} · P = ${fmt(P)}`, N === best ? " · this paragraph's best match" : ` · its best is N = ${fmt(best)}`),
    el("div", { class: "muted small", text: `best sentence pair, cos ${fmt(cosine)}` }),
    el("q", { class: "src", text: srcText }),
    el("q", { class: "cand", text: hitText }));
  document.body.dataset.selectMs = (performance.now() - t0).toFixed(2);  // a click's work (bench/ui_render.py)
}

function sources(view, row) {
  return view.texts.sources.length > 1 ? `like[${row.source}] ` : "source ";
}

// -- wiring ------------------------------------------------------------------------------------------
function init() {
  const s = storage();
  state.key = (s && s.getItem(KEY_STORE)) || "";
  $("#key-state").textContent = state.key ? "key in use" : "";
  $("#key-form").addEventListener("submit", (ev) => { ev.preventDefault(); useKey($("#api-key").value.trim()); });
  $("#key-forget").addEventListener("click", () => useKey(""));
  $("#error-close").addEventListener("click", clearError);
  $("#index").addEventListener("change", () => {
    state.index = $("#index").value;
    if (storage()) storage().setItem(INDEX_STORE, state.index);
  });
  for (const radio of document.querySelectorAll("input[name=kind]")) {
    radio.addEventListener("change", () => {
      $("#by-id").hidden = kind() !== "id";
      $("#by-text").hidden = kind() !== "text";
    });
  }
  const input = $("#source-id");
  input.addEventListener("input", () => { clearTimeout(findTimer); findTimer = setTimeout(suggest, 200); });
  input.addEventListener("blur", () => setTimeout(hideSuggestions, 150));
  input.addEventListener("keydown", (ev) => { if (ev.key === "Escape") hideSuggestions(); });
  $("#query-form").addEventListener("submit", (ev) => { ev.preventDefault(); search(); });
  $("#back").addEventListener("click", () => showView("search"));
  const heat = $("#heat");
  heat.addEventListener("click", (ev) => { const at = cellAt(ev); if (at) selectCell(at.i, at.j); });
  heat.addEventListener("mousemove", (ev) => {
    const at = cellAt(ev);
    const v = state.view;
    heat.title = at ? `source ¶${v.mx.rows[at.i].paragraph} × hit ¶${at.j}: N = ${fmt(v.mx.normalised[at.i][at.j])}` : "";
  });
  heat.addEventListener("keydown", (ev) => {
    const v = state.view;
    if (!v || !v.sel) return;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    const d = moves[ev.key];
    if (!d) return;
    ev.preventDefault();
    const i = Math.min(v.mx.rows.length - 1, Math.max(0, v.sel.i + d[0]));
    const j = Math.min(v.mx.columns.length - 1, Math.max(0, v.sel.j + d[1]));
    selectCell(i, j);
  });
  renderChips();
  loadIndices();
}

document.addEventListener("DOMContentLoaded", init);
