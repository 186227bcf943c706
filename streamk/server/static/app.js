// streamk's search page: a photo (dropped or picked), an optional box drawn on it, k, the
// second stage on or off (and a metadata filter where the server has them); results as
// thumbnails with their score, inliers and the matched region; a click searches with a result.
// Plain script: no build step, nothing fetched but this server's API.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const state = { token: sessionStorage.getItem("streamk-token") || "", query: null, box: null, health: null,
                seq: 0, urls: [] };

function setStatus(text, error) {
  $("status").textContent = text;
  $("status").classList.toggle("error", !!error);
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (state.token) headers.Authorization = "Bearer " + state.token;
  const resp = await fetch(path, Object.assign({}, options, { headers }));
  if (!resp.ok) {
    let message = resp.status + " " + resp.statusText;
    try {
      const body = await resp.json();
      if (body.error) message = body.error.code + ": " + body.error.message;
    } catch (e) { /* not JSON */ }
    const err = new Error(message);
    err.status = resp.status;
    throw err;
  }
  return resp;
}

// ------------------------------------------------------------------ the query
// The photo of the query, or none yet (``url`` null: the view stays hidden until one is
// set, so the page never shows an <img> without a picture, a broken-image icon).
function showQuery(url, caption, drawable) {
  const img = $("query-img");
  $("drop-hint").hidden = true;
  $("query-view").hidden = !url;
  $("query-view").style.cursor = drawable ? "crosshair" : "default";
  img.onload = () => {
    $("query-overlay").setAttribute("viewBox", `-0.5 -0.5 ${img.naturalWidth} ${img.naturalHeight}`);
  };
  img.onerror = () => { $("query-view").hidden = true; };
  if (url) img.src = url; else img.removeAttribute("src");
  $("query-caption").textContent = caption;
  setBox(null);
}

function releaseQuery() {
  if (state.query && state.query.url) URL.revokeObjectURL(state.query.url);
}

function setQueryFile(file) {
  if (!file) return;
  releaseQuery();
  const url = URL.createObjectURL(file);
  state.query = { kind: "image", file, url };
  showQuery(url, `${file.name}: drag on the photo to search inside a box`, true);
  search();
}

function setBox(box) {
  state.box = box;
  const r = $("box-rect");
  r.toggleAttribute("hidden", !box);  // an SVG element has no .hidden property: the attribute + CSS
  $("clear-box").hidden = !box;
  if (box) {
    r.setAttribute("x", box[0]); r.setAttribute("y", box[1]);
    r.setAttribute("width", box[2] - box[0]); r.setAttribute("height", box[3] - box[1]);
  }
}

function imagePoint(ev) {  // pointer -> pixel coordinates of the photo as stored
  const img = $("query-img");
  const rect = img.getBoundingClientRect();
  const x = (ev.clientX - rect.left) * img.naturalWidth / rect.width - 0.5;
  const y = (ev.clientY - rect.top) * img.naturalHeight / rect.height - 0.5;
  return [Math.max(0, Math.min(img.naturalWidth - 1, x)), Math.max(0, Math.min(img.naturalHeight - 1, y))];
}

function setupBoxDrawing() {
  const view = $("query-view");
  let start = null;
  view.addEventListener("pointerdown", (ev) => {
    if (!state.query || state.query.kind !== "image") return;
    ev.preventDefault();
    view.setPointerCapture(ev.pointerId);
    start = imagePoint(ev);
  });
  view.addEventListener("pointermove", (ev) => {
    if (!start) return;
    const p = imagePoint(ev);
    setBox([Math.min(start[0], p[0]), Math.min(start[1], p[1]), Math.max(start[0], p[0]), Math.max(start[1], p[1])]);
  });
  view.addEventListener("pointerup", (ev) => {
    if (!start) return;
    start = null;
    const b = state.box;
    if (b && (b[2] - b[0] < 8 || b[3] - b[1] < 8)) setBox(null);  // a click, not a box
    search();
  });
}

// ------------------------------------------------------------------ searching
function whereFilter() {  // the filter's text, checked to be a JSON object ("" when none)
  const text = $("where-box").hidden ? "" : $("where").value.trim();
  if (!text) return "";
  let value = null;
  try { value = JSON.parse(text); } catch (err) { /* reported below */ }
  if (!value || typeof value !== "object" || Array.isArray(value)) {
    const field = (state.fields || ["field"])[0];
    throw new Error(`the filter is a JSON object of indexed fields, such as {"${field}": "value"}`);
  }
  return text;
}

function searchRequest() {
  const k = Math.max(1, Math.min(100, parseInt($("k").value, 10) || 10));
  const verify = $("verify").checked;
  const bar = $("bar").value;  // the verified mark's bar (false alarms per pair)
  const where = whereFilter();
  const q = state.query;
  if (q.kind === "image") {
    const form = new FormData();
    form.append("image", q.file, q.file.name);
    form.append("k", String(k));
    if (!verify) { form.append("verify", "0"); form.append("expand", "0"); } else form.append("false_alarms_per_pair", bar);
    if (state.box) form.append("box", state.box.map((v) => v.toFixed(1)).join(","));
    if (where) form.append("where", where);
    return { method: "POST", body: form };
  }
  const body = { id: q.id, k };
  if (!verify) { body.verify = 0; body.expand = 0; } else body.false_alarms_per_pair = Number(bar);
  if (where) body.where = JSON.parse(where);
  return { method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } };
}

async function search() {
  if (!state.query) return;
  const seq = ++state.seq;
  setStatus("searching…");
  $("results").setAttribute("aria-busy", "true");
  try {
    const resp = await api("/search", searchRequest());
    const body = await resp.json();
    if (seq !== state.seq) return;  // a newer search was started meanwhile
    renderResults(body);
    filterExample(body.results);
    const verified = body.results.filter((h) => h.verified).length;
    setStatus(`${body.results.length} results, ${verified} verified, in ${Math.round(body.took_ms)} ms`);
  } catch (err) {
    if (seq !== state.seq) return;
    setStatus(err.message, true);
    if (err.status === 401) askToken();
  } finally {
    if (seq === state.seq) $("results").setAttribute("aria-busy", "false");
  }
}

// ------------------------------------------------------------------ results
async function loadThumbnail(img, id) {
  try {
    const resp = await api(`/images/${encodeURIComponent(id)}/thumbnail`);
    const url = URL.createObjectURL(await resp.blob());
    state.urls.push(url);
    img.src = url;
  } catch (err) {  // text in place of the picture: no broken-image icon
    const note = document.createElement("span");
    note.className = "missing muted";
    note.textContent = "(no thumbnail)";
    img.replaceWith(note);
  }
}

function renderResults(body) {
  state.urls.forEach((u) => URL.revokeObjectURL(u));
  state.urls = [];
  const grid = $("results");
  grid.replaceChildren();
  body.results.forEach((hit, i) => {
    const fig = document.createElement("figure");
    fig.className = "result" + (hit.verified ? " verified" : "");
    fig.dataset.id = hit.id;
    fig.dataset.rank = String(i + 1);
    const meta = hit.metadata && Object.keys(hit.metadata).length
      ? "\n" + Object.entries(hit.metadata).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n") : "";
    fig.title = `search with ${hit.id}${meta}`;
    const thumb = document.createElement("div");
    thumb.className = "thumb";
    const img = document.createElement("img");
    img.alt = hit.id;
    thumb.appendChild(img);
    if (hit.verified && hit.region && hit.image_size) {  // where the query matched, by the verified map
      const svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("viewBox", `-0.5 -0.5 ${hit.image_size[0]} ${hit.image_size[1]}`);
      svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
      const poly = document.createElementNS(SVG, "polygon");
      poly.setAttribute("points", hit.region.map((p) => p.join(",")).join(" "));
      svg.appendChild(poly);
      thumb.appendChild(svg);
    }
    fig.appendChild(thumb);
    const cap = document.createElement("figcaption");
    const inliers = hit.inliers === null || hit.inliers === undefined ? ""
      : `<span class="inliers">${hit.inliers} inliers${hit.verified ? " ✓" : ""}</span>`;
    // as the CLI and the notebook show them: how significant the inliers are, and why not verified
    const nfa = typeof hit.log10_nfa === "number"
      ? `<span class="nfa" title="how often unrelated photos would show inliers this many and this precise by chance, per pair, as a power of ten; verified at -4 and below">log10 NFA ${hit.log10_nfa.toFixed(1)}</span>`
      : "";
    const why = hit.why ? `<span class="why"></span>` : "";
    cap.innerHTML = `<span class="id"></span><span class="score">#${i + 1} · ${hit.score.toFixed(3)}</span>${inliers}${nfa}${why}`;
    cap.querySelector(".id").textContent = hit.id;
    if (hit.why) cap.querySelector(".why").textContent = `not verified: ${hit.why}`;
    fig.appendChild(cap);
    fig.addEventListener("click", () => searchWith(hit.id, img.getAttribute("src")));
    grid.appendChild(fig);
    loadThumbnail(img, hit.id);
  });
}

// A search with an indexed image: its thumbnail becomes the query's photo (the query keeps
// that URL, so that the next page of results does not revoke it); fetched when not loaded yet.
async function searchWith(id, thumbUrl) {
  releaseQuery();
  const owned = thumbUrl && state.urls.includes(thumbUrl);
  if (owned) state.urls = state.urls.filter((u) => u !== thumbUrl);
  const query = { kind: "id", id, url: owned ? thumbUrl : null };
  state.query = query;
  showQuery(query.url, `indexed image ${id}`, false);
  const searching = search();
  if (!query.url) {
    try {
      const url = URL.createObjectURL(await (await api(`/images/${encodeURIComponent(id)}/thumbnail`)).blob());
      if (state.query !== query) { URL.revokeObjectURL(url); return; }
      query.url = url;
      showQuery(url, `indexed image ${id}`, false);
    } catch (err) { /* no thumbnail: the caption names the image */ }
  }
  await searching;
}

// ------------------------------------------------------------------ set-up
function askToken() {
  $("token-box").hidden = false;
  $("token").focus();
}

// /stats: the image count, and the indexed metadata fields: the filter is offered only
// when there is one, its placeholder names a real one. True when the server answered.
async function refreshStats() {
  try {
    const s = await (await api("/stats")).json();
    $("stats").textContent = `${s.images.toLocaleString()} images`;
    state.fields = s.indexed_fields || [];
    $("where-box").hidden = !(state.health && state.health.filters && state.fields.length);
    $("where").placeholder = state.fields.length ? `{"${state.fields[0]}": …}` : "";
    return true;
  } catch (err) {
    $("stats").textContent = "";
    if (err.status === 401) setStatus("the server refused this token: " + err.message, true);
    return false;
  }
}

// Once results show a value of the first indexed field, the placeholder is a filter that
// works as written.
function filterExample(results) {
  const field = (state.fields || [])[0];
  const hit = field && results.find((h) => h.metadata && h.metadata[field] !== undefined);
  if (hit) $("where").placeholder = JSON.stringify({ [field]: hit.metadata[field] });
}

const READY = "drop a photo, or pick one";

async function init() {
  setupBoxDrawing();
  const drop = $("drop");
  $("file").addEventListener("change", (ev) => setQueryFile(ev.target.files[0]));
  drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (ev) => {
    ev.preventDefault();
    drop.classList.remove("over");
    if (ev.dataTransfer.files.length) setQueryFile(ev.dataTransfer.files[0]);
  });
  $("k").addEventListener("change", search);
  $("verify").addEventListener("change", () => { $("bar").disabled = !$("verify").checked; search(); });
  $("bar").addEventListener("change", search);
  $("where").addEventListener("change", search);
  $("clear-box").addEventListener("click", () => { setBox(null); search(); });
  $("token").value = state.token;
  $("token").addEventListener("change", async () => {
    state.token = $("token").value.trim();
    sessionStorage.setItem("streamk-token", state.token);
    if (!(await refreshStats())) return;
    if (state.query) search();
    else setStatus("token accepted: " + READY);
  });
  try {
    state.health = await (await fetch("/health")).json();
    if (state.health.reads_need_token) $("token-box").hidden = false;
  } catch (err) {
    setStatus("the server does not answer", true);
    return;
  }
  if (state.health.status !== "ok") {  // index_replaced: it serves nothing until restarted
    setStatus(state.health.status + ": " + (state.health.message || ""), true);
    return;
  }
  if (state.health.reads_need_token && !state.token) {
    setStatus("this server needs its token to search");
    askToken();
  } else if (await refreshStats()) {
    if (!state.query) setStatus(READY);
  } else if (state.health.reads_need_token) {
    askToken();
  }
}

init();
