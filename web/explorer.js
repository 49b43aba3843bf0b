/* The book's explorers on the static site (convres/explorers.py writes their data into the page).
 *
 * For every <div class="convres-explorer">: reads its JSON (controls, Vega-Lite charts, the record of
 * every slider position), builds one range slider per control, a readout and the charts, and on every
 * slider move shows the precomputed record of the new position. Nothing is computed here: every number
 * and every curve comes from the record. Vega and Vega-Lite are served by the site itself
 * (_static/vendor/, pinned in web/package.json) and loaded on demand, through require.js when the page
 * has it (pages with saved ipywidgets), so that their UMD bundles never meet an anonymous define().
 *
 * window.convresExplorers[id] exposes each explorer to the browser test (tests/test_site.py): its
 * data, its Vega views, and `idle()`, a promise that resolves once the last slider move is drawn.
 */
(function () {
  'use strict';
  var registry = (window.convresExplorers = window.convresExplorers || {});
  var script = document.currentScript;
  var vendor = new URL('../vendor/', script ? script.src : document.baseURI).href;
  var SUP = {'-': '\u207b', 0: '\u2070', 1: '\u00b9', 2: '\u00b2', 3: '\u00b3', 4: '\u2074',
             5: '\u2075', 6: '\u2076', 7: '\u2077', 8: '\u2078', 9: '\u2079'};

  // Numbers as convres.explorers.format_number writes them: 3 significant digits.
  function fmt(x, kind) {
    if (kind === 'int') return String(Math.round(x));
    if (x === 0) return '0';
    if (!isFinite(x)) return String(x);
    var r = Number(x.toPrecision(3));
    var e = Math.floor(Math.log10(Math.abs(r)));
    if (e >= -2 && e <= 2) return r.toFixed(Math.max(0, 2 - e));
    var sup = String(e).split('').map(function (c) { return SUP[c]; }).join('');
    return (r / Math.pow(10, e)).toFixed(2) + ' \u00d7 10' + sup;
  }

  function loadScript(src) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement('script');
      s.src = src;
      s.async = false;
      s.onload = resolve;
      s.onerror = function () { reject(new Error('could not load ' + src)); };
      document.head.appendChild(s);
    });
  }

  var libs = null;
  function loadLibraries() {
    if (libs) return libs;
    if (window.vega && window.vegaLite) {
      libs = Promise.resolve({vega: window.vega, vegaLite: window.vegaLite});
    } else if (typeof window.define === 'function' && window.define.amd && window.requirejs) {
      libs = new Promise(function (resolve, reject) {
        window.requirejs.config({paths: {'vega': vendor + 'vega/vega.min',
                                         'vega-lite': vendor + 'vega-lite/vega-lite.min'}});
        window.requirejs(['vega', 'vega-lite'], function (vega, vegaLite) {
          resolve({vega: vega, vegaLite: vegaLite});
        }, reject);
      });
    } else {
      libs = Promise.all([loadScript(vendor + 'vega/vega.min.js'),
                          loadScript(vendor + 'vega-lite/vega-lite.min.js')])
        .then(function () { return {vega: window.vega, vegaLite: window.vegaLite}; });
    }
    return libs;
  }

  // The rows {x, y, s, m} of one series of one record (convres.explorers.series_rows, in JavaScript);
  // values below the chart's floor (if any) are drawn at the floor.
  function seriesRows(series, rec, floor) {
    var xs, ys;
    if (series.const_x) {
      var v = rec[series.y];
      if (v === undefined || v === null) return [];
      xs = series.const_x;
      ys = xs.map(function () { return v; });
    } else {
      ys = rec[series.y];
      if (!ys) return [];
      if (series.x === 'index1') xs = ys.map(function (_, i) { return i + 1; });
      else if (series.x === 'index0') xs = ys.map(function (_, i) { return i; });
      else xs = rec[series.x];
    }
    var every = series.every || 1;
    return ys.map(function (y, i) {
      return {x: xs[i], y: floor === undefined || floor === null ? y : Math.max(y, floor), s: series.key,
              m: i % every === 0 || i === ys.length - 1};
    });
  }

  function readoutHTML(lines) {
    return lines.map(function (line) {
      return '<span class="cx-line">' + line.map(function (piece) {
        if (typeof piece === 'string') return piece;
        var value = Array.isArray(piece) ? piece[0] : piece;
        var kind = Array.isArray(piece) ? piece[1] : 'num';
        return '<span class="cx-num" data-value="' + value + '">' + fmt(value, kind) + '</span>';
      }).join('') + '</span>';
    }).join(' ');
  }

  function el(tag, attrs, html) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (html !== undefined) e.innerHTML = html;
    return e;
  }

  function build(root, lib) {
    var data = JSON.parse(root.querySelector('script.cx-data').textContent);
    var id = root.id;
    var fallback = root.querySelector('.cx-fallback');
    if (fallback) fallback.remove();
    var app = el('div', {'class': 'cx-app'});
    var controls = el('div', {'class': 'cx-controls', role: 'group',
                              'aria-label': data.title + ': sliders'});
    var readout = el('p', {'class': 'cx-readout', 'aria-live': 'polite'});
    app.appendChild(controls);
    app.appendChild(readout);
    var index = data.start.split(',').map(Number);
    var inputs = data.controls.map(function (c, k) {
      var box = el('div', {'class': 'cx-control'});
      var inputId = id + '-' + c.name;
      box.appendChild(el('label', {'for': inputId},
                         '<span class="cx-symbol">' + c.label + '</span> <span class="cx-help">' +
                         c.help + '</span>'));
      var list = el('datalist', {id: inputId + '-ticks'});
      c.values.forEach(function (_, i) { list.appendChild(el('option', {value: String(i)})); });
      var input = el('input', {type: 'range', id: inputId, min: '0', max: String(c.values.length - 1),
                               step: '1', value: String(index[k]), list: inputId + '-ticks',
                               'data-control': c.name});
      var out = el('output', {'for': inputId});
      box.appendChild(input);
      box.appendChild(list);
      box.appendChild(out);
      controls.appendChild(box);
      return {input: input, output: out, control: c};
    });
    var charts = data.charts.map(function (c) {
      var box = el('div', {'class': 'cx-chart', 'data-chart': c.name});
      app.appendChild(box);
      var spec = lib.vegaLite.compile(c.spec).spec;
      var view = new lib.vega.View(lib.vega.parse(spec), {renderer: 'svg', container: box, hover: false});
      return {def: c, view: view, box: box};
    });
    root.insertBefore(app, root.querySelector('script.cx-data'));

    var state = {busy: Promise.resolve(), drawn: 0};
    function show() {
      index = inputs.map(function (s) { return Number(s.input.value); });
      var key = index.join(',');
      var rec = data.positions[key];
      inputs.forEach(function (s, k) {
        var text = s.control.text[index[k]];
        s.output.textContent = text;
        s.input.setAttribute('aria-valuetext', s.control.name + ' = ' + text);
      });
      readout.innerHTML = readoutHTML(rec.readout);
      var runs = charts.map(function (c) {
        var rows = [];
        c.def.series.forEach(function (s) { rows = rows.concat(seriesRows(s, rec, c.def.floor)); });
        c.view.signal('labels', rec.labels || {});
        c.view.change('table', lib.vega.changeset().remove(function () { return true; }).insert(rows));
        return c.view.runAsync();
      });
      state.busy = Promise.all(runs).then(function () {
        root.dataset.position = key;
        state.drawn += 1;
        root.dataset.drawn = String(state.drawn);
      });
      return state.busy;
    }
    inputs.forEach(function (s) { s.input.addEventListener('input', show); });
    registry[id] = {
      data: data,
      views: charts.reduce(function (o, c) { o[c.def.name] = c.view; return o; }, {}),
      format: fmt,
      idle: function () { return state.busy; }
    };
    return show();
  }

  function start() {
    var roots = Array.prototype.slice.call(document.querySelectorAll('.convres-explorer'));
    if (!roots.length) return;
    var ready = loadLibraries().then(function (lib) {
      return Promise.all(roots.map(function (root) { return build(root, lib); }));
    }).then(function () { window.convresExplorersDrawnAt = performance.now(); });
    window.convresExplorersReady = ready;
    ready.catch(function (err) { console.error('convres explorer:', err); });
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
