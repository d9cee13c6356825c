// Building the console's nodes: never HTML text, so nothing read from the API is markup.

export const $ = (id) => document.getElementById(id);

/** Sparkline points: two minutes at one poll every 2 s. */
export const HISTORY = 60;

/** An element with attributes (`on…` are listeners) and children (text or nodes). */
export function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';

/** A small SVG line of `values` (newest last), scaled to its own maximum. */
export function sparkline(values, label) {
  const w = 120;
  const ht = 28;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('viewBox', `0 0 ${w} ${ht}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  const base = document.createElementNS(SVG, 'line');
  base.setAttribute('x1', '0');
  base.setAttribute('x2', String(w));
  base.setAttribute('y1', String(ht - 1));
  base.setAttribute('y2', String(ht - 1));
  svg.append(base);
  if (values.length > 1) {
    const max = Math.max(...values, 1);
    const step = w / (HISTORY - 1);
    const x0 = w - step * (values.length - 1);
    const points = values
      .map((v, i) => `${(x0 + i * step).toFixed(1)},${(ht - 2 - (v / max) * (ht - 4)).toFixed(1)}`)
      .join(' ');
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', points);
    svg.append(line);
  }
  return svg;
}

export function setStatus(text) {
  $('status').textContent = text;
}

export function fmtRate(n) {
  return (n ?? 0).toFixed(n >= 10 ? 0 : 1);
}

export function countsList(obj, empty) {
  const entries = Object.entries(obj ?? {});
  if (entries.length === 0) return h('p', { class: 'hint' }, empty);
  return h('ul', { class: 'counts' }, entries.map(([k, v]) => h('li', {}, `${k} ${v}`)));
}

export function figure(label, value, note, id) {
  return h(
    'div',
    { class: 'figure' },
    h('div', { class: 'value', id }, String(value)),
    h('div', { class: 'label' }, label),
    h('div', { class: 'label' }, note),
  );
}
