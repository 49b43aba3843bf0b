/* The book's live explorers (convres.explorers writes their settings and instances into the page).
 *
 * For every <div class="convres-explorer">: reads its JSON (sliders' ranges, presets, the bank of
 * instances), builds the controls (beta and mu continuous, d_QK and the seed from the bank, the
 * attention scale 1/d_QK or 1/sqrt(d_QK)) and runs gradient descent in the page with web/model.js:
 * beta = 0 beside the chosen beta, each up to the horizon, a slice at a time so that the page stays
 * responsive and the curves grow as they are computed. Then, for the escape panel, the run without
 * residual at every d_QK of the bank (stopped at its escape). Charts are drawn here, in SVG, on
 * axes that follow the data; the step axis is logarithmic (log(1 + t)) when the horizon is long.
 *
 * Layout: nothing above the controls changes height (the preset captions share one reserved box),
 * so a slider never moves under the pointer. The previous setting stays drawn faintly (the ghost,
 * which does not widen the axes); the pointer over a chart, or a tap on it, reads the values at
 * that step; a click in the escape panel sets d_QK. The readout gives each run's last loss also
 * relative to its start, as the prose does.
 * Links of the prose (<a class="cx-preset-link">, convres.explorers.Explorer.link) set a preset and
 * scroll to the explorer (on a phone, up to 36rem, to its readout and first chart: the controls
 * above them are taller than the screen).
 *
 * window.convresExplorers[id] serves the browser test (tests/test_site.py): set(values), values(),
 * preset(id), idle() (a promise: everything drawn), state() (runs, escape steps, chart domains) and
 * compute(values, steps) (one fresh run, its losses and its time in ms).
 */
(function () {
  'use strict';
  var Model = window.convresModel;
  var registry = (window.convresExplorers = window.convresExplorers || {});
  var SVGNS = 'http://www.w3.org/2000/svg';
  var COLORS = {b0: '#D55E00', chosen: '#0072B2', ref: '#555555', ghost: 'rgba(0, 114, 178, 0.3)', bad: '#C00000'};
  var SUP = {'-': '\u207b', 0: '\u2070', 1: '\u00b9', 2: '\u00b2', 3: '\u00b3', 4: '\u2074',
             5: '\u2075', 6: '\u2076', 7: '\u2077', 8: '\u2078', 9: '\u2079'};
  var SLICE_MS = 12;   // computing time between two redraws
  var DQK = 'd<sub>QK</sub>';

  // --- numbers ----------------------------------------------------------------------------------
  function sup(e) { return String(e).split('').map(function (c) { return SUP[c]; }).join(''); }
  // 3 significant digits, plain from 0.01 to 999, else m.mm × 10^e (convres.explorers' readouts).
  function fmt(x) {
    if (x === 0) return '0';
    if (!isFinite(x)) return String(x);
    var r = Number(x.toPrecision(3)), e = Math.floor(Math.log10(Math.abs(r)));
    if (e >= -2 && e <= 2) return r.toFixed(Math.max(0, 2 - e));
    return (r / Math.pow(10, e)).toFixed(2) + ' \u00d7 10' + sup(e);
  }
  function fmtInt(t) { return t >= 10000 ? t.toLocaleString('en-US') : String(t); }
  function tickText(v) {
    var e = Math.round(Math.log10(v));
    if (Math.abs(Math.log10(v) - e) < 1e-9) return e >= 0 && e <= 3 ? String(Math.pow(10, e)) : '10' + sup(e);
    return String(Number(v.toPrecision(2)));
  }

  // --- the controls' scales -----------------------------------------------------------------------
  var POS = 1000;   // positions of a continuous slider
  // beta: 0 at the left end, then logarithmic-like (fine steps near 0, where the physics is)
  function betaAt(p, range) { return p === 0 ? 0 : range[1] * (Math.pow(10, 3 * p / POS) - 1) / 999; }
  function betaPos(b, range) { return b <= 0 ? 0 : Math.round(POS * Math.log10(1 + 999 * b / range[1]) / 3); }
  function muAt(p, range) { return range[0] * Math.pow(range[1] / range[0], p / POS); }
  function muPos(mu, range) { return Math.round(POS * Math.log(mu / range[0]) / Math.log(range[1] / range[0])); }
  function round3(x) { return x === 0 ? 0 : Number(x.toPrecision(3)); }

  // --- the steps drawn: all of the first 100, then about 300 per decade ---------------------------
  function drawnSteps(last) {
    var out = [];
    for (var t = 0; t <= Math.min(last, 100); t++) out.push(t);
    for (var u = 100; u < last; ) { u = Math.min(last, Math.max(u + 1, Math.round(u * 1.008))); out.push(u); }
    return out;
  }

  // --- one SVG chart ------------------------------------------------------------------------------
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.innerHTML = text;
    return e;
  }
  function svgEl(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }
  // Ticks of a log axis over [lo, hi]: decades (thinned to at most 6), or 1-2-5 values when the
  // range spans less than a decade and a half.
  function logTicks(lo, hi) {
    var e0 = Math.ceil(Math.log10(lo) - 1e-9), e1 = Math.floor(Math.log10(hi) + 1e-9), out = [];
    if (e1 - e0 >= 1) {
      var step = Math.max(1, Math.ceil((e1 - e0 + 1) / 6));
      for (var e = e0; e <= e1; e++) if (e % step === 0) out.push(Math.pow(10, e));
      return out;
    }
    for (e = e0 - 1; e <= e1; e++) [1, 2, 5].forEach(function (m) {
      var v = m * Math.pow(10, e);
      if (v >= lo && v <= hi) out.push(v);
    });
    return out;
  }

  /* A chart: x and y axes, each 'log', 'log1p' (log(1 + t), for steps from 0) or 'lin'.
   * draw(spec): spec.x, spec.y domains; spec.lines [{xs, ys, color, dash, width, opacity}]; spec.points
   * [{x, y, color, shape, hollow, label}]; spec.hlines / spec.vlines [{v, color, dash, label}]. */
  function Chart(box, opts) {
    this.box = box;
    this.opts = opts;
    this.svg = svgEl('svg', {role: 'img', 'aria-label': opts.label});
    box.appendChild(this.svg);
    this.hoverLine = null;
  }
  Chart.prototype.map = function (axis, v) {
    var kind = this.opts[axis], dom = this.dom[axis], f = function (u) {
      return kind === 'log' ? Math.log10(u) : kind === 'log1p' ? Math.log10(1 + u) : u;
    };
    var a = this.px[axis], q = (f(v) - f(dom[0])) / (f(dom[1]) - f(dom[0]));
    return axis === 'x' ? a[0] + q * (a[1] - a[0]) : a[1] - q * (a[1] - a[0]);
  };
  Chart.prototype.invertX = function (px) {
    var kind = this.opts.x, dom = this.dom.x, a = this.px.x, q = (px - a[0]) / (a[1] - a[0]);
    if (kind === 'lin') return dom[0] + q * (dom[1] - dom[0]);
    var f = kind === 'log' ? function (u) { return Math.log10(u); } : function (u) { return Math.log10(1 + u); };
    var v = Math.pow(10, f(dom[0]) + q * (f(dom[1]) - f(dom[0])));
    return kind === 'log' ? v : v - 1;
  };
  Chart.prototype.ticks = function (axis) {
    var kind = this.opts[axis], dom = this.dom[axis];
    if (kind === 'log') return logTicks(dom[0], dom[1]);
    if (kind === 'log1p') return [0].concat(logTicks(1, dom[1]).filter(function (v) { return v >= 10 || v === 1; }));
    var raw = (dom[1] - dom[0]) / 5, e10 = Math.pow(10, Math.floor(Math.log10(raw))), out = [];
    var step = [1, 2, 5, 10].map(function (f) { return f * e10; }).filter(function (s) { return s >= raw; })[0];
    for (var v = Math.ceil(dom[0] / step) * step; v <= dom[1] + 1e-12; v += step) out.push(Number(v.toPrecision(6)));
    return out;
  };
  Chart.prototype.draw = function (spec) {
    var self = this, w = Math.max(260, this.box.clientWidth), h = this.opts.height, svg = this.svg;
    var left = 58, right = 12, top = 10, bottom = 40;
    this.dom = {x: spec.x, y: spec.y};
    this.px = {x: [left, w - right], y: [top, h - bottom]};
    this.spec = spec;
    svg.setAttribute('width', w);
    svg.setAttribute('height', h);
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var frame = svgEl('rect', {x: left, y: top, width: w - left - right, height: h - top - bottom,
                               fill: 'white', stroke: '#bbbbbb'});
    svg.appendChild(frame);
    ['x', 'y'].forEach(function (axis) {
      self.ticks(axis).forEach(function (v) {
        var p = self.map(axis, v), text = self.opts[axis] === 'lin' ? String(v) : tickText(v || 0);
        if (axis === 'x') {
          svg.appendChild(svgEl('line', {x1: p, x2: p, y1: top, y2: h - bottom, stroke: '#e6e6e6'}));
          var tx = svgEl('text', {x: p, y: h - bottom + 15, 'text-anchor': 'middle', 'class': 'cx-tick'});
          tx.textContent = text;
          svg.appendChild(tx);
        } else {
          svg.appendChild(svgEl('line', {x1: left, x2: w - right, y1: p, y2: p, stroke: '#e6e6e6'}));
          var ty = svgEl('text', {x: left - 5, y: p + 4, 'text-anchor': 'end', 'class': 'cx-tick'});
          ty.textContent = text;
          svg.appendChild(ty);
        }
      });
    });
    var xl = svgEl('text', {x: (left + w - right) / 2, y: h - 6, 'text-anchor': 'middle', 'class': 'cx-axis'});
    if (this.opts.xlabelSub) {   // d_QK: the subscript as a tspan
      xl.textContent = this.opts.xlabel;
      var sub = svgEl('tspan', {'baseline-shift': 'sub', 'font-size': '9'});
      sub.textContent = this.opts.xlabelSub;
      xl.appendChild(sub);
    } else xl.textContent = this.opts.xlabel;
    var yl = svgEl('text', {x: 12, y: (top + h - bottom) / 2, 'text-anchor': 'middle', 'class': 'cx-axis',
                            transform: 'rotate(-90 12 ' + (top + h - bottom) / 2 + ')'});
    yl.textContent = this.opts.ylabel;
    svg.appendChild(xl);
    svg.appendChild(yl);
    var clipId = 'cx-clip-' + Math.random().toString(36).slice(2);
    var clip = svgEl('clipPath', {id: clipId});
    clip.appendChild(svgEl('rect', {x: left, y: top, width: w - left - right, height: h - top - bottom}));
    svg.appendChild(clip);
    var plot = svgEl('g', {'clip-path': 'url(#' + clipId + ')'});
    svg.appendChild(plot);
    (spec.hlines || []).forEach(function (r) {
      var y = self.map('y', r.v);
      plot.appendChild(svgEl('line', {x1: left, x2: w - right, y1: y, y2: y, stroke: r.color, 'stroke-dasharray': r.dash || '',
                                      'stroke-width': 1.3, 'class': 'cx-ref'}));
    });
    (spec.vlines || []).forEach(function (r) {
      var x = self.map('x', r.v);
      plot.appendChild(svgEl('line', {x1: x, x2: x, y1: top, y2: h - bottom, stroke: r.color,
                                      'stroke-dasharray': r.dash || '', 'stroke-width': r.width || 1.3}));
    });
    (spec.lines || []).forEach(function (s) {
      var d = [];
      for (var i = 0; i < s.xs.length; i++) {
        var y = s.ys[i];
        if (!(y > 0) && self.opts.y === 'log') continue;
        d.push((d.length ? 'L' : 'M') + self.map('x', s.xs[i]).toFixed(1) + ' ' + self.map('y', y).toFixed(1));
      }
      if (d.length) {
        plot.appendChild(svgEl('path', {d: d.join(''), fill: 'none', stroke: s.color, 'stroke-width': s.width || 2,
                                        'stroke-dasharray': s.dash || '', opacity: s.opacity || 1,
                                        'data-series': s.key || ''}));
      }
    });
    (spec.points || []).forEach(function (pt) {
      var x = self.map('x', pt.x), y = self.map('y', pt.y), m;
      if (pt.shape === 'triangle') m = svgEl('path', {d: 'M' + x + ' ' + (y - 6) + 'l6 10h-12z'});
      else m = svgEl('circle', {cx: x, cy: y, r: 4.5});
      m.setAttribute('fill', pt.hollow ? 'white' : pt.color);
      m.setAttribute('stroke', pt.color);
      m.setAttribute('stroke-width', 2);
      m.setAttribute('data-series', pt.key || '');
      plot.appendChild(m);
    });
    this.hoverLine = svgEl('line', {y1: top, y2: h - bottom, stroke: '#555555', 'stroke-dasharray': '3 3',
                                    visibility: 'hidden'});
    svg.appendChild(this.hoverLine);
  };
  // The x value under the pointer (or null outside the plot), and the rule drawn there.
  Chart.prototype.pointer = function (ev) {
    if (!this.dom) return null;
    var r = this.svg.getBoundingClientRect(), x = ev.clientX - r.left;
    if (x < this.px.x[0] || x > this.px.x[1]) { this.hoverLine.setAttribute('visibility', 'hidden'); return null; }
    this.hoverLine.setAttribute('x1', x);
    this.hoverLine.setAttribute('x2', x);
    this.hoverLine.setAttribute('visibility', 'visible');
    return this.invertX(x);
  };

  // A domain that follows positive values: [min / pad, max * pad].
  function logDomain(values, pad) {
    var lo = Infinity, hi = -Infinity;
    values.forEach(function (v) { if (v > 0 && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    if (!isFinite(lo)) return [0.1, 10];
    pad = pad || 1.6;
    if (hi / lo < 2) { var mid = Math.sqrt(hi * lo); lo = Math.min(lo, mid / 1.5); hi = Math.max(hi, mid * 1.5); }
    return [lo / pad, hi * pad];
  }

  function legend(items) {
    return items.map(function (it) {
      return '<span class="cx-key"><svg width="28" height="10" aria-hidden="true"><line x1="1" x2="27" y1="5" y2="5" stroke="' +
        it.color + '" stroke-width="2" stroke-dasharray="' + (it.dash || '') + '"/></svg>' + it.text + '</span>';
    }).join(' ');
  }

  // --- one explorer ---------------------------------------------------------------------------------
  function build(root) {
    var data = JSON.parse(root.querySelector('script.cx-data').textContent);
    var id = root.id, bank = data.bank, charts = data.charts;
    var fallback = root.querySelector('.cx-fallback');
    if (fallback) fallback.remove();
    var longAxis = data.horizon > 1000, wantSigma = charts.indexOf('sigma') >= 0;
    var compare = charts.indexOf('loss') >= 0;   // beta = 0 beside the chosen beta
    // decoded instances, by seed and d_QK
    var cacheInst = {};
    function inst(seed, dqk) {
      var key = seed + '/' + dqk;
      if (!cacheInst[key]) {
        var base = bank.data[String(seed)], w = bank.weights[key], o = {N: bank.N, n: bank.n, d: bank.d, m: bank.m, r: bank.r};
        ['X', 'R', 'Y'].forEach(function (k) { o[k] = Model.decode(base[k]); });
        ['V', 'W_1', 'W_2', 'W_U', 'P', 'Gq', 'Gk'].forEach(function (k) { o[k] = Model.decode(w[k]); });
        o.floor = base.floor;
        cacheInst[key] = o;
      }
      return cacheInst[key];
    }
    function scaleOf(v) { return v.scale === '1/d_qk' ? 1 / v.d_qk : 1 / Math.sqrt(v.d_qk); }
    function newRun(v, beta) {
      return new Model.Run(inst(v.seed, v.d_qk), {beta: beta, mu: v.mu, s: scaleOf(v), act: bank.act,
                                                   rtol: data.rtol, blowup: data.blowup});
    }

    // -- the page element
    var app = el('div', {'class': 'cx-app'});
    var bar = el('div', {'class': 'cx-presets', role: 'group', 'aria-label': data.title + ': presets'});
    bar.appendChild(el('span', {'class': 'cx-presets-title'}, 'Go to'));
    var looks = el('div', {'class': 'cx-looks', 'aria-live': 'polite'});
    var presets = data.presets.map(function (p) {
      var b = el('button', {type: 'button', 'class': 'cx-preset', 'data-preset': p.id, 'aria-pressed': 'false'}, p.label);
      var look = el('p', {'class': 'cx-look', 'data-preset': p.id}, p.look);
      bar.appendChild(b);
      looks.appendChild(look);
      return {def: p, button: b, look: look};
    });
    bar.addEventListener('scroll', function () { bar.classList.toggle('cx-scrolled', bar.scrollLeft > 1); }, {passive: true});
    app.appendChild(bar);
    app.appendChild(looks);   // every caption in one grid cell: its height is the tallest's, always

    var controls = el('div', {'class': 'cx-controls', role: 'group', 'aria-label': data.title + ': controls'});
    function slider(name, label, help, max) {
      var inputId = id + '-' + name;
      var box = el('div', {'class': 'cx-control'});
      box.appendChild(el('label', {'for': inputId}, '<span class="cx-symbol">' + label + '</span> <span class="cx-help">' + help + '</span>'));
      var input = el('input', {type: 'range', id: inputId, min: '0', max: String(max), step: '1', 'data-control': name});
      var out = el('output', {'for': inputId});
      box.appendChild(input);
      box.appendChild(out);
      controls.appendChild(box);
      return {input: input, output: out};
    }
    function choice(name, label, options) {
      var box = el('div', {'class': 'cx-control'});
      box.appendChild(el('span', {'class': 'cx-label'}, '<span class="cx-symbol">' + label + '</span>'));
      var group = el('div', {'class': 'cx-choice', role: 'radiogroup', 'aria-label': label.replace(/<[^>]+>/g, '')});
      var inputs = options.map(function (o) {
        var lab = el('label', {}), r = el('input', {type: 'radio', name: id + '-' + name, value: String(o.value), 'data-control': name});
        lab.appendChild(r);
        lab.appendChild(document.createTextNode(' '));
        lab.appendChild(el('span', {}, o.text));
        group.appendChild(lab);
        return r;
      });
      box.appendChild(group);
      box.appendChild(el('span', {}));
      controls.appendChild(box);
      return inputs;
    }
    var ctl = {
      beta: slider('beta', '\u03b2', 'residual coefficient', POS),
      mu: slider('mu', '\u03bc', 'step size (log scale)', POS)
    };
    if (data.d_qks.length > 1) ctl.d_qk = slider('d_qk', 'd<sub>QK</sub>', 'query/key width', data.d_qks.length - 1);
    if (data.seeds.length > 1) {
      ctl.seed = choice('seed', 'seed', data.seeds.map(function (s) { return {value: s, text: String(s)}; }));
    }
    if (data.d_qks.length > 1) {
      ctl.scale = choice('scale', 'scale', [{value: '1/d_qk', text: '1/d<sub>QK</sub>'},
                                            {value: '1/sqrt(d_qk)', text: '1/\u221ad<sub>QK</sub>'}]);
    }
    app.appendChild(controls);
    var readout = el('div', {'class': 'cx-readout', 'aria-live': 'polite'});
    app.appendChild(readout);

    var views = {};
    function chartBox(name, opts) {
      var box = el('div', {'class': 'cx-chart', 'data-chart': name});
      var keys = el('p', {'class': 'cx-keys'});
      var hover = el('p', {'class': 'cx-hover', 'aria-hidden': 'true'}, '&nbsp;');
      app.appendChild(box);
      app.appendChild(keys);
      app.appendChild(hover);
      views[name] = {chart: new Chart(box, opts), keys: keys, hover: hover, box: box};
    }
    var stepAxis = longAxis ? 'log1p' : 'lin', stepLabel = 'step t' + (longAxis ? ' (log scale)' : '');
    if (charts.indexOf('loss') >= 0 || charts.indexOf('envelope') >= 0) {
      chartBox('loss', {x: stepAxis, y: 'log', xlabel: stepLabel, ylabel: 'loss \u03a6(\u03b8\u209c)', height: 250,
                        label: 'loss against the step'});
    }
    // the loss axis spans every decade the runs go through; "zoom" shows the floor's neighbourhood
    // (from a tenth of the escape level to twice the start), where the plateau and its end are
    var zoom = null;
    if (charts.indexOf('loss') >= 0) {
      var zl = el('label', {'class': 'cx-zoom'});
      zoom = el('input', {type: 'checkbox', 'data-control': 'zoom'});
      zl.appendChild(zoom);
      zl.appendChild(document.createTextNode(' zoom on the rank-one floor (the plateau)'));
      app.insertBefore(zl, views.loss.hover);
      zoom.addEventListener('change', function () { if (state.main) draw(); });
    }
    if (charts.indexOf('ratio') >= 0) {
      chartBox('ratio', {x: stepAxis, y: 'lin', xlabel: stepLabel, ylabel: '\u03a6\u209c\u208a\u2081 / \u03a6\u209c',
                         height: 200, label: 'ratio of consecutive losses'});
    }
    if (charts.indexOf('sigma') >= 0) {
      chartBox('sigma', {x: stepAxis, y: 'log', xlabel: stepLabel, ylabel: '\u03c3\u2098\u1d62\u2099(Z\u209c)', height: 190,
                         label: 'smallest singular value of the attention output'});
    }
    if (charts.indexOf('escape') >= 0) {
      app.appendChild(el('p', {'class': 'cx-panel-title'}, 'The escape at every d<sub>QK</sub> (no residual, this ' +
        '\u03bc, seed and scale): the first step with the loss below half the rank-one floor. Click a point to go there.'));
      chartBox('escape', {x: 'log', y: 'log', xlabel: 'd', xlabelSub: 'QK', ylabel: 'escape step', height: 210,
                          label: 'escape step against d_QK'});
    }
    var ghostNote = el('p', {'class': 'cx-ghost-note'}, '&nbsp;');
    app.appendChild(ghostNote);
    root.insertBefore(app, root.querySelector('script.cx-data'));

    // -- the state: the setting, the runs, the escape steps
    var values = Object.assign({}, data.start);
    var state = {job: null, main: null, ghost: null, ghostValues: null, escapes: {}, drawn: 0,
                 idle: Promise.resolve(), resolveIdle: null};
    var b0cache = {};   // the run without residual, by d_QK, mu, seed and scale
    function key0(v) { return [v.d_qk, v.mu, v.seed, v.scale].join('|'); }
    function escKey(v) { return [v.mu, v.seed, v.scale].join('|'); }

    function showValues() {
      ctl.beta.input.value = String(betaPos(values.beta, data.beta));
      ctl.beta.output.textContent = String(values.beta);
      ctl.mu.input.value = String(muPos(values.mu, data.mu));
      ctl.mu.output.textContent = String(Number(values.mu.toPrecision(3)));
      if (ctl.d_qk) {
        ctl.d_qk.input.value = String(data.d_qks.indexOf(values.d_qk));
        ctl.d_qk.output.textContent = String(values.d_qk);
      }
      if (ctl.seed) ctl.seed.forEach(function (r) { r.checked = Number(r.value) === values.seed; });
      if (ctl.scale) ctl.scale.forEach(function (r) { r.checked = r.value === values.scale; });
      ['beta', 'mu', 'd_qk'].forEach(function (k) {
        if (ctl[k]) ctl[k].input.setAttribute('aria-valuetext', k + ' = ' + values[k]);
      });
      presets.forEach(function (p) {
        var on = ['beta', 'mu', 'd_qk', 'seed', 'scale'].every(function (k) { return p.def.values[k] === values[k]; });
        p.button.setAttribute('aria-pressed', String(on));
        p.look.classList.toggle('cx-shown', on);
        // the row of presets scrolls sideways on a phone: the pressed one is brought into it
        // (the row alone scrolls, not the page; the row is the buttons' offsetParent, explorer.css)
        if (on && bar.scrollWidth > bar.clientWidth) {
          var left = p.button.offsetLeft, right = left + p.button.offsetWidth;
          if (left < bar.scrollLeft || right > bar.scrollLeft + bar.clientWidth * 0.85) {
            bar.scrollLeft = Math.max(0, left - 40);
          }
        }
      });
    }

    // Recorded along a run: every loss, and sigma_min(Z_t) at the steps drawn.
    function Track(run, horizon, sigma) {
      this.run = run;
      this.wantSigma = sigma !== false && wantSigma;
      this.horizon = horizon;
      this.sigma = [];
      this.sigmaAt = {};
      drawnSteps(horizon).forEach(function (t) { this.sigmaAt[t] = true; }, this);
      this.alpha = null;
      this.escape = null;
      this.floor = run.inst.floor;
    }
    Track.prototype.advance = function (stopAtEscape) {
      var self = this, r = this.run, hitEscape = false;
      var more = r.step(this.horizon, function (t, phi) {
        if (t === 0 || (self.wantSigma && self.sigmaAt[t])) {
          var sp = r.spectra(), last = r.inst.N * r.inst.n - 1;
          if (t === 0) self.alpha = Math.pow(sp.H[last] / 2, 2);
          self.sigma.push([t, sp.Z[last]]);
        }
        if (self.escape === null && phi < data.escape * self.floor) { self.escape = t; hitEscape = true; }
      });
      return more && !(stopAtEscape && hitEscape);
    };

    // The work of a setting: the main runs, then the escape panel; a slice at a time.
    function start(reason) {
      showValues();
      var v = Object.assign({}, values);
      var k0 = key0(v);
      var main = {v: v, b0: b0cache[k0] || new Track(newRun(v, 0), data.horizon), chosen: null};
      b0cache = {};
      b0cache[k0] = main.b0;
      main.chosen = v.beta === 0 ? main.b0 : new Track(newRun(v, v.beta), data.horizon);
      if (!compare) main.b0 = main.chosen;   // one run: the chosen beta
      state.main = main;
      var myJob = {};
      state.job = myJob;
      if (!state.resolveIdle) state.idle = new Promise(function (res) { state.resolveIdle = res; });
      var pending = charts.indexOf('escape') >= 0 ? data.d_qks.slice() : [];
      var ek = escKey(v), esc = state.escapes[ek] = state.escapes[ek] || {};
      var escTrack = null, lastDraw = 0;
      function tick() {
        if (state.job !== myJob) return;
        var t0 = performance.now(), busy = true;
        while (busy && performance.now() - t0 < SLICE_MS) {
          busy = false;
          for (var k = 0; k < 20; k++) {
            var a = main.b0.run.status === 'running' && main.b0.advance(false);
            var b = main.chosen !== main.b0 && main.chosen.run.status === 'running' && main.chosen.advance(false);
            busy = a || b;
            if (!busy) break;
          }
          if (!busy) {   // the escape panel: beta = 0 at the other d_QK, each up to its escape
            if (main.b0.run.status !== 'running') esc[v.d_qk] = main.b0.escape;
            while (pending.length && (pending[0] in esc)) pending.shift();
            if (pending.length) {
              busy = true;
              if (!escTrack || escTrack.dqk !== pending[0]) {
                escTrack = new Track(newRun(Object.assign({}, v, {d_qk: pending[0]}), 0), data.horizon, false);
                escTrack.dqk = pending[0];
              }
              for (k = 0; k < 20; k++) {
                if (!escTrack.advance(true)) { esc[escTrack.dqk] = escTrack.escape; escTrack = null; break; }
              }
            }
          }
        }
        if (!busy || performance.now() - lastDraw > 50) { draw(); lastDraw = performance.now(); }
        if (busy) setTimeout(tick, 0);
        else {
          root.dataset.done = String((Number(root.dataset.done) || 0) + 1);
          var res = state.resolveIdle;
          state.resolveIdle = null;
          if (res) res();
        }
      }
      setTimeout(tick, 0);
      return state.idle;
    }

    function keepGhost() {
      if (state.main && state.main.chosen.run.loss.length) {
        state.ghost = state.main.chosen.run.loss.slice();
        state.ghostValues = state.main.v;
      }
    }
    function setValues(v, reason) {
      // a preset (or a link) that is the current setting changes nothing: no run, no ghost of itself
      if (state.main && Object.keys(v).every(function (k) { return values[k] === v[k]; })) return state.idle;
      keepGhost();
      Object.assign(values, v);
      return start(reason);
    }

    // -- drawing
    function describe(v) {
      return '\u03b2 = ' + v.beta + ', \u03bc = ' + fmt(v.mu) + (data.d_qks.length > 1 ? ', ' + DQK + ' = ' + v.d_qk + ', scale ' +
        v.scale.replace('sqrt(d_qk)', '\u221ad_qk').replace('d_qk', DQK) + ', seed ' + v.seed : ', seed ' + v.seed);
    }
    function series(track, steps) {
      var loss = track.run.loss, xs = [], ys = [];
      steps.forEach(function (t) { if (t < loss.length) { xs.push(t); ys.push(loss[t]); } });
      return {xs: xs, ys: ys};
    }
    function envelope(track, steps) {
      var mu = state.main.v.mu, a = track.alpha, l0 = track.run.loss[0], xs = [], ys = [];
      if (a === null || !(mu * a < 1)) return null;
      steps.forEach(function (t) { xs.push(t); ys.push(l0 * Math.pow(1 - mu * a, t)); });
      return {xs: xs, ys: ys};
    }
    function draw() {
      var m = state.main, v = m.v, steps = drawnSteps(data.horizon), floor = m.b0.floor;
      var both = m.chosen !== m.b0, lines = [], keys = [];
      var lb0 = series(m.b0, steps), lch = series(m.chosen, steps);
      var env = charts.indexOf('envelope') >= 0 ? envelope(m.chosen, steps) : null;
      if (views.loss) {
        // the axis follows the runs of this setting; the previous setting (the ghost) may leave it
        var all = lb0.ys.concat(lch.ys);
        if (state.ghost) {
          var gs = steps.filter(function (t) { return t < state.ghost.length; });
          var gy = gs.map(function (t) { return state.ghost[t]; });
          lines.push({xs: gs, ys: gy, color: COLORS.ghost, width: 1.5, key: 'ghost'});
        }
        if (charts.indexOf('loss') >= 0) {
          all.push(floor);
          lines.push(Object.assign({color: COLORS.b0, key: 'b0'}, lb0));
          keys.push({color: COLORS.b0, text: '\u03b2 = 0 (no residual)'});
        }
        if (both || charts.indexOf('loss') < 0) {
          lines.push(Object.assign({color: COLORS.chosen, dash: '6 3', key: 'chosen'}, lch));
          keys.push({color: COLORS.chosen, dash: '6 3', text: '\u03b2 = ' + v.beta});
        }
        if (env) {
          lines.push(Object.assign({color: COLORS.ref, dash: '2 3', width: 1.5, key: 'envelope'}, env));
          keys.push({color: COLORS.ref, dash: '2 3', text: 'the theorem\u2019s envelope \u03a6\u2080(1 \u2212 \u03bc\u03b1)\u1d57 of \u03b2 = ' + v.beta});
          all = all.concat(env.ys.filter(function (y) { return y >= Math.min.apply(null, lch.ys) / 100; }));
        }
        var hl = [];
        if (charts.indexOf('loss') >= 0) {
          hl = [{v: floor, color: '#222222', dash: '2 3'}, {v: data.escape * floor, color: '#999999', dash: '1 4'}];
          keys.push({color: '#222222', dash: '2 3', text: 'rank-one floor'});
          keys.push({color: '#999999', dash: '1 4', text: 'half the floor (the escape)'});
        }
        var pts = [];
        [[m.b0, COLORS.b0, 'b0'], [m.chosen, COLORS.chosen, 'chosen']].forEach(function (q) {
          if (q[0].escape !== null && (q[0] === m.b0 ? charts.indexOf('loss') >= 0 : both)) {
            pts.push({x: q[0].escape, y: q[0].run.loss[q[0].escape], color: q[1], key: 'escape-' + q[2]});
          }
        });
        var starts = [m.b0.run.loss[0], m.chosen.run.loss[0], floor].filter(function (y) { return y > 0; });
        var ydom = zoom && zoom.checked ? [data.escape * floor / 10, 2 * Math.max.apply(null, starts)] : logDomain(all);
        views.loss.chart.draw({x: [0, data.horizon], y: ydom, lines: lines, hlines: hl, points: pts});
        views.loss.keys.innerHTML = legend(keys);
      }
      if (views.ratio) {
        var r = m.chosen.run.loss, xs = [], ys = [], bad = [], bound = 1 - v.mu * (m.chosen.alpha || 0);
        for (var t = 0; t + 1 < r.length; t++) {
          xs.push(t);
          ys.push(r[t + 1] / r[t]);
          if (r[t + 1] / r[t] > bound) bad.push({x: t, y: r[t + 1] / r[t], color: COLORS.bad, key: 'above'});
        }
        var lo = Math.min.apply(null, ys.concat([bound])), hi = Math.max.apply(null, ys.concat([bound, 1]));
        var padR = Math.max(1e-3, (hi - lo) * 0.08);
        views.ratio.chart.draw({x: [0, data.horizon], y: [lo - padR, hi + padR], lines: [
          {xs: xs, ys: ys, color: COLORS.chosen, key: 'ratio'}], hlines: [{v: bound, color: COLORS.ref, dash: '6 3'}],
          points: bad.slice(0, 200)});
        views.ratio.keys.innerHTML = legend([{color: COLORS.chosen, text: '\u03a6\u209c\u208a\u2081 / \u03a6\u209c, \u03b2 = ' + v.beta},
                                             {color: COLORS.ref, dash: '6 3', text: '1 \u2212 \u03bc\u03b1 (the theorem\u2019s bound; red: above it)'}]);
      }
      if (views.sigma) {
        var sl = [], svals = [];
        [[m.b0, COLORS.b0, '', 'b0'], [m.chosen, COLORS.chosen, '6 3', 'chosen']].forEach(function (q) {
          if (q[3] === 'chosen' && !both) return;   // beta = 0 chosen: one run, drawn once
          sl.push({xs: q[0].sigma.map(function (p) { return p[0]; }), ys: q[0].sigma.map(function (p) { return p[1]; }),
                   color: q[1], dash: q[2], key: q[3]});
          svals = svals.concat(q[0].sigma.map(function (p) { return p[1]; }));
        });
        views.sigma.chart.draw({x: [0, data.horizon], y: logDomain(svals), lines: sl});
        views.sigma.keys.innerHTML = legend([{color: COLORS.b0, text: '\u03b2 = 0'}].concat(
          both ? [{color: COLORS.chosen, dash: '6 3', text: '\u03b2 = ' + v.beta}] : []));
      }
      if (views.escape) {
        var esc = state.escapes[escKey(v)] || {}, got = data.d_qks.filter(function (q) { return q in esc; });
        var epts = got.map(function (q) {
          var c = esc[q] === null;
          return {x: q, y: c ? data.horizon : Math.max(1, esc[q]), color: COLORS.b0, hollow: c, key: 'escape'};
        });
        var fit = escapeFit(esc), fitted = fit && fit.meaningful ? fit : null, elines = [{xs: epts.map(function (p) { return p.x; }), ys: epts.map(function (p) { return p.y; }),
                                             color: COLORS.b0, width: 1.5, key: 'escape'}];
        if (fitted) elines.push({xs: [data.d_qks[0], data.d_qks[data.d_qks.length - 1]],
          ys: [fit.c * Math.pow(data.d_qks[0], fit.p), fit.c * Math.pow(data.d_qks[data.d_qks.length - 1], fit.p)],
          color: COLORS.ref, dash: '6 3', width: 1.3, key: 'fit'});
        if (both && m.chosen.escape !== null) epts.push({x: v.d_qk, y: Math.max(1, m.chosen.escape), color: COLORS.chosen,
                                                         shape: 'triangle', key: 'escape-chosen'});
        views.escape.chart.draw({x: [data.d_qks[0] / 1.6, data.d_qks[data.d_qks.length - 1] * 1.6],
                                 y: logDomain(epts.map(function (p) { return p.y; }).concat([1]), 1.8), lines: elines, points: epts,
                                 vlines: [{v: v.d_qk, color: '#bbbbbb', width: 10}]});
        views.escape.keys.innerHTML = legend([{color: COLORS.b0, text: '\u03b2 = 0 (hollow: not within ' + fmtInt(data.horizon) + ' steps)'}]
          .concat(fitted ? [{color: COLORS.ref, dash: '6 3', text: 'least-squares fit: escape \u221d ' + DQK +
                             '<sup>' + fit.p.toFixed(2) + '</sup>'}] : [])
          .concat(both ? [{color: COLORS.chosen, text: '\u25b2 \u03b2 = ' + v.beta + ' at this ' + DQK}] : [])
          .concat([{color: '#bbbbbb', text: 'the current ' + DQK}])) +
          (fit && !fit.meaningful ? ' <span class="cx-key">No power-law fit: the escape does not grow steadily with ' +
           DQK + ' here.</span>' : '');
      }
      readout.innerHTML = readoutText(m, v, both);
      ghostNote.innerHTML = state.ghost ? '<span class="cx-ghost-swatch"></span> Faint line: the previous setting, ' +
        describe(state.ghostValues) + '.' : '&nbsp;';
      holdHeights();
      state.drawn += 1;
      root.dataset.drawn = String(state.drawn);
    }
    // The text around the charts (readout, legends, the ghost's note) keeps the tallest height it
    // has had at this width: when it loses a line (beta = 0 has one run, not two), nothing below it,
    // the next explorer of the page included, moves up under the pointer.
    function holdHeights(reset) {
      [readout, ghostNote].concat(Object.keys(views).map(function (k) { return views[k].keys; })).forEach(function (e) {
        if (reset) { e.style.minHeight = ''; e.heldHeight = 0; return; }
        var h = e.getBoundingClientRect().height;
        if (h > (e.heldHeight || 0)) { e.heldHeight = h; e.style.boxSizing = 'border-box'; e.style.minHeight = h + 'px'; }
      });
    }
    // The power law through the escape steps (all found, at least 3): log T = log c + p log d_QK.
    // It is drawn only where it means something (`meaningful`): the escape grows with d_QK at every
    // step of the bank and the line explains at least 90 % of the variance of log T (at the scale
    // 1/sqrt(d_QK) the escapes are flat and not monotone: no law to draw).
    function escapeFit(esc) {
      var pts = data.d_qks.filter(function (q) { return esc[q] !== undefined && esc[q] !== null && esc[q] > 0; });
      if (pts.length < 3 || pts.length < data.d_qks.length) return null;
      var xs = pts.map(Math.log), ys = pts.map(function (q) { return Math.log(esc[q]); }), n = xs.length;
      var mx = xs.reduce(function (a, b) { return a + b; }) / n, my = ys.reduce(function (a, b) { return a + b; }) / n;
      var sxy = 0, sxx = 0;
      for (var i = 0; i < n; i++) { sxy += (xs[i] - mx) * (ys[i] - my); sxx += (xs[i] - mx) * (xs[i] - mx); }
      var p = sxy / sxx, c = my - p * mx, ss = 0, res = 0;
      for (i = 0; i < n; i++) { ss += (ys[i] - my) * (ys[i] - my); res += Math.pow(ys[i] - c - p * xs[i], 2); }
      var rising = pts.every(function (q, k) { return k === 0 || esc[q] > esc[pts[k - 1]]; });
      return {p: p, c: Math.exp(c), meaningful: rising && p > 0 && ss > 0 && res <= 0.1 * ss};
    }
    function runText(track, name) {
      var r = track.run, last = r.loss.length - 1, s = '<b>' + name + '</b>: ';
      var parts = [];
      if (charts.indexOf('loss') >= 0) {
        parts.push(track.escape !== null ? 'below half the floor from step ' + fmtInt(track.escape) :
          (r.status === 'running' ? 'on the floor so far' : 'not below half the floor'));
      }
      if (r.status === 'diverged') parts.push('diverged at step ' + fmtInt(last + 1) + ' (the loss left ' + fmt(data.blowup) + ' times its start)');
      else if (r.status === 'converged') parts.push('at 10\u207b\u00b2\u2070 of its start at step ' + fmtInt(last) + ' (float64 rounding: the run stops)');
      else parts.push('loss ' + fmt(r.loss[last]) + ' (' + fmt(r.loss[last] / r.loss[0]) + ' of \u03a6\u2080) at step ' +
                      fmtInt(last) + (r.status === 'running' ? ' (running)' : ''));
      return s + parts.join('; ') + '.';
    }
    function readoutText(m, v, both) {
      var lines = [];
      if (charts.indexOf('loss') >= 0) lines.push(runText(m.b0, '\u03b2 = 0'));
      if (both || charts.indexOf('loss') < 0) lines.push(runText(m.chosen, '\u03b2 = ' + v.beta));
      var a = m.chosen.alpha;
      if (a !== null && (charts.indexOf('envelope') >= 0 || charts.indexOf('ratio') >= 0)) {
        var ma = v.mu * a, s = '\u03b1 = (\u03c3<sub>Nn</sub>(H<sub>0</sub>)/2)\u00b2 = ' + fmt(a) + ', \u03bc\u03b1 = ' + fmt(ma);
        if (ma < 1) s += ': over ' + fmtInt(data.horizon) + ' steps the envelope falls to ' + fmt(Math.pow(1 - ma, data.horizon)) + ' of \u03a6\u2080';
        var l = m.chosen.run.loss, over = -1;
        for (var t = 0; t < l.length; t++) if (l[t] > l[0] * Math.pow(1 - ma, t) * (1 + 1e-9)) { over = t; break; }
        s += over < 0 ? '; the loss is under it at every step so far.' : '; the loss rises above it at step ' + fmtInt(over) + '.';
        if (data.mu_hat) s += ' The chapter\u2019s step for this seed: \u03bc\u0302 = 1/(2L\u0302) = ' + fmt(data.mu_hat[String(v.seed)]) + '.';
        lines.push(s);
      }
      return lines.map(function (x) { return '<span class="cx-line">' + x + '</span>'; }).join('');
    }

    // -- hover
    Object.keys(views).forEach(function (name) {
      var vw = views[name];
      var show = function (ev) {
        var x = vw.chart.pointer(ev);
        if (x === null) { vw.hover.innerHTML = '&nbsp;'; return; }
        var m = state.main;
        if (name === 'escape') {
          var q = data.d_qks.reduce(function (a, b) { return Math.abs(Math.log(b / x)) < Math.abs(Math.log(a / x)) ? b : a; });
          var e = (state.escapes[escKey(m.v)] || {})[q];
          vw.hover.innerHTML = DQK + ' = ' + q + ': ' + (e === undefined ? 'computing' : e === null ? 'no escape within ' + fmtInt(data.horizon) + ' steps' : 'escape at step ' + fmtInt(e));
          return;
        }
        var t = Math.max(0, Math.round(x)), parts = [];
        var pick = function (track, label) {
          var arr = name === 'sigma' ? track.sigma : null;
          if (arr) {
            var best = arr.reduce(function (a, b) { return Math.abs(b[0] - t) < Math.abs(a[0] - t) ? b : a; }, arr[0] || [0, NaN]);
            parts.push(label + ' ' + fmt(best[1]));
          } else if (name === 'ratio') {
            var l = track.run.loss;
            if (t + 1 < l.length) parts.push(label + ' ' + fmt(l[t + 1] / l[t]));
          } else if (t < track.run.loss.length) parts.push(label + ' ' + fmt(track.run.loss[t]));
        };
        if (charts.indexOf('loss') >= 0 && name !== 'ratio') pick(m.b0, '\u03b2 = 0:');
        if (m.chosen !== m.b0 || name === 'ratio' || charts.indexOf('loss') < 0) pick(m.chosen, '\u03b2 = ' + m.v.beta + ':');
        vw.hover.innerHTML = 't = ' + fmtInt(t) + ': ' + parts.join('; ');
      };
      // a mouse shows the values under it; a finger shows them where it taps (and they stay)
      vw.box.addEventListener('pointermove', show);
      vw.box.addEventListener('pointerdown', show);
      vw.box.addEventListener('pointerleave', function (ev) {
        if (ev.pointerType === 'touch' || ev.pointerType === 'pen') return;
        vw.hover.innerHTML = '&nbsp;';
        if (vw.chart.hoverLine) vw.chart.hoverLine.setAttribute('visibility', 'hidden');
      });
    });
    if (views.escape) {
      views.escape.box.addEventListener('click', function (ev) {
        var x = views.escape.chart.pointer(ev);
        if (x === null) return;
        var q = data.d_qks.reduce(function (a, b) { return Math.abs(Math.log(b / x)) < Math.abs(Math.log(a / x)) ? b : a; });
        if (q !== values.d_qk) setValues({d_qk: q});
      });
    }

    // -- events
    ctl.beta.input.addEventListener('input', function () {
      values.beta = round3(betaAt(Number(ctl.beta.input.value), data.beta));
      start('beta');
    });
    ctl.mu.input.addEventListener('input', function () {
      values.mu = round3(muAt(Number(ctl.mu.input.value), data.mu));
      start('mu');
    });
    if (ctl.d_qk) ctl.d_qk.input.addEventListener('input', function () {
      values.d_qk = data.d_qks[Number(ctl.d_qk.input.value)];
      start('d_qk');
    });
    // the ghost is the setting before a drag (kept when the pointer goes down or a key is pressed)
    ['beta', 'mu', 'd_qk'].forEach(function (k) {
      if (!ctl[k]) return;
      ctl[k].input.addEventListener('pointerdown', keepGhost);
      ctl[k].input.addEventListener('keydown', keepGhost);
    });
    (ctl.seed || []).forEach(function (r) { r.addEventListener('change', function () { setValues({seed: Number(r.value)}); }); });
    (ctl.scale || []).forEach(function (r) { r.addEventListener('change', function () { setValues({scale: r.value}); }); });
    presets.forEach(function (p) { p.button.addEventListener('click', function () { setValues(p.def.values); }); });
    var width = app.clientWidth;
    window.addEventListener('resize', function () {
      if (app.clientWidth !== width && state.main) { width = app.clientWidth; holdHeights(true); draw(); }
    });

    registry[id] = {
      data: data,
      values: function () { return Object.assign({}, values); },
      set: function (v) { return setValues(v); },
      preset: function (name) {
        var p = presets.filter(function (q) { return q.def.id === name; })[0];
        if (!p) return Promise.reject(new Error(id + ': no preset ' + name));
        return setValues(p.def.values);
      },
      idle: function () { return state.idle; },
      state: function () {
        var m = state.main, out = {values: Object.assign({}, m.v), horizon: data.horizon, domains: {},
                                   escapes: state.escapes[escKey(m.v)] || {}};
        out.b0 = {loss: m.b0.run.loss.slice(), status: m.b0.run.status, escape: m.b0.escape};
        out.chosen = {loss: m.chosen.run.loss.slice(), status: m.chosen.run.status, escape: m.chosen.escape,
                      alpha: m.chosen.alpha};
        Object.keys(views).forEach(function (k) { out.domains[k] = views[k].chart.dom; });
        out.zoom = !!(zoom && zoom.checked);
        return out;
      },
      // a chart's axes and the points of one drawn series (pixels), for the test
      chart: function (name) {
        var c = views[name].chart;
        return {dom: c.dom, px: c.px, path: function (key) {
          var e = c.svg.querySelector('path[data-series="' + key + '"]'), v = e ? e.getAttribute('d').match(/-?[\d.]+/g).map(Number) : [];
          var pts = [];
          for (var i = 0; i + 1 < v.length; i += 2) pts.push([v[i], v[i + 1]]);
          return pts;
        }};
      },
      compute: function (v, steps) {
        var w = Object.assign({}, values, v), r = newRun(w, w.beta), t0 = performance.now();
        while (r.step(steps)) { /* the whole run */ }
        return {loss: r.loss, status: r.status, ms: performance.now() - t0};
      }
    };
    return start('start');
  }

  // A link of the prose to a preset: set the explorer, scroll to it.
  document.addEventListener('click', function (ev) {
    var a = ev.target && ev.target.closest ? ev.target.closest('a.cx-preset-link') : null;
    if (!a) return;
    var id = (a.getAttribute('href') || '').replace(/^#/, ''), target = document.getElementById(id);
    if (!target) return;
    ev.preventDefault();
    // on a phone the controls fill a screen: the link brings the readout and the loss chart below it
    // into view instead (the presets and the sliders are just above)
    var runs = window.matchMedia('(max-width: 36rem)').matches ? target.querySelector('.cx-readout') : null;
    (runs || target).scrollIntoView({block: 'start'});
    var ex = registry[id];
    if (ex) ex.preset(a.getAttribute('data-cx-preset')).catch(function (err) { console.error('convres explorer:', err); });
  });

  function init() {
    var roots = Array.prototype.slice.call(document.querySelectorAll('.convres-explorer'));
    var ready = Promise.all(roots.map(function (root) {
      try { return build(root); } catch (err) { console.error('convres explorer:', err); return null; }
    }));
    window.convresExplorersReady = ready.then(function () { window.convresExplorersDrawnAt = performance.now(); });
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
