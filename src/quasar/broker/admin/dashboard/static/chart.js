// A small SVG line chart for live series (no library: the npm registry and CDNs are out of reach and the
// dashboard has no build step). Points are pushed as they are polled; the last `capacity` are drawn.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const HEIGHT = 220;
const PAD = { left: 56, right: 12, top: 12, bottom: 26 };

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

/** Round step for about `count` ticks over [0, max]. */
export function niceStep(max, count = 4) {
  if (!(max > 0)) return 1;
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const scaled = raw / power;
  const step = scaled <= 1 ? 1 : scaled <= 2 ? 2 : scaled <= 5 ? 5 : 10;
  return step * power;
}

export class LineChart {
  /** series: [{name, cls}] (cls: CSS class of the line and legend swatch); unit: shown after the values;
   *  capacity: points kept; format(value) -> text for axis and legend; id: data-chart attribute. */
  constructor(series, { unit = "", capacity = 120, format = (v) => String(v), id = "" } = {}) {
    this.series = series;
    this.unit = unit;
    this.capacity = capacity;
    this.format = format;
    this.points = []; // [{t: ms, values: [number|null]}]
    this.root = document.createElement("figure");
    this.root.className = "chart";
    this.root.dataset.chart = id;
    this.svg = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": id });
    this.legend = document.createElement("figcaption");
    this.root.append(this.svg, this.legend);
    this.render();
  }

  /** Add a point (values in the series' order; null = no value at t) and redraw. */
  push(values, t = Date.now()) {
    this.points.push({ t, values });
    if (this.points.length > this.capacity) this.points.splice(0, this.points.length - this.capacity);
    this.render();
  }

  render() {
    this.svg.replaceChildren();
    const values = this.points.flatMap((p) => p.values).filter((v) => v !== null && Number.isFinite(v));
    const plotW = WIDTH - PAD.left - PAD.right;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    const step = niceStep(Math.max(0, ...values));
    const top = Math.max(step, Math.ceil(Math.max(0, ...values) / step) * step);
    const y = (v) => PAD.top + plotH - (v / top) * plotH;
    for (let tick = 0; tick <= top + step / 2; tick += step) {
      this.svg.append(svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(tick), y2: y(tick), class: "grid" }));
      this.svg.append(svg("text", { x: PAD.left - 6, y: y(tick) + 4, class: "axis", "text-anchor": "end" },
        this.format(tick)));
    }
    const now = this.points.length ? this.points[this.points.length - 1].t : Date.now();
    const spanMs = Math.max(1000, (this.capacity - 1) * 1000);
    const x = (t) => PAD.left + plotW - ((now - t) / spanMs) * plotW;
    for (const seconds of [0, spanMs / 2000, spanMs / 1000]) {
      this.svg.append(svg("text", { x: x(now - seconds * 1000), y: HEIGHT - 6, class: "axis", "text-anchor": "middle" },
        seconds === 0 ? "now" : `-${Math.round(seconds)} s`));
    }
    if (values.length === 0) {
      this.svg.append(svg("text", { x: PAD.left + plotW / 2, y: PAD.top + plotH / 2, class: "nodata",
        "text-anchor": "middle" }, "no data"));
    }
    this.series.forEach((serie, index) => {
      let path = "";
      let pen = "M";
      let last = null;
      for (const point of this.points) {
        const v = point.values[index];
        if (v === null || v === undefined || !Number.isFinite(v) || x(point.t) < PAD.left) {
          pen = "M";
          last = null;
          continue;
        }
        last = [x(point.t), y(v)];
        path += `${pen}${last[0].toFixed(1)},${last[1].toFixed(1)} `;
        pen = "L";
      }
      if (path) this.svg.append(svg("path", { d: path, class: `line ${serie.cls}` }));
      if (last) this.svg.append(svg("circle", { cx: last[0], cy: last[1], r: 3, class: `dot ${serie.cls}` }));
    });
    this.renderLegend();
  }

  renderLegend() {
    this.legend.replaceChildren();
    const last = this.points.length ? this.points[this.points.length - 1].values : [];
    this.series.forEach((serie, index) => {
      const v = last[index];
      const shown = v === null || v === undefined ? "no data" : `${this.format(v)} ${this.unit}`.trim();
      const item = document.createElement("span");
      item.className = "legend-item";
      const swatch = document.createElement("span");
      swatch.className = `swatch ${serie.cls}`;
      const label = document.createElement("span");
      label.textContent = `${serie.name}: `;
      const value = document.createElement("span");
      value.dataset.series = serie.name;
      value.textContent = shown;
      item.append(swatch, label, value);
      this.legend.append(item);
    });
  }
}
