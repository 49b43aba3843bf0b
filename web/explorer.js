/* The book's explorers on the static site (convres/explorers.py writes their data into the page).
 *
 * For every <div class="convres-explorer">: reads its JSON (controls, Vega-Lite charts, the record of
 * every slider position), builds one range slider per control, a readout and the charts, and on every
 * slider move shows the precomputed record of the new position. Nothing is computed here: every number
 * and every curve comes from the record. Vega and Vega-Lite are served by the site itself
 * (_static/vendor/, pinned in web/package.json) and loaded on demand, through require.js when the page
 * has it (pages with saved ipywidgets), so that their UMD bundles never meet an anonymous define().
 *
 * Above the sliders, preset buttons set them to a named setting (links of the prose do the same and
 * scroll to the explorer: <a class="cx-preset-link">, convres.vega.PresetLink). The previous setting
 * stays drawn faintly behind the current one (the ghost trace); the pointer over a chart shows the
 * values at the nearest step; the overview panel shows one number of every position of two controls
 * (the others where they are), the current one outlined, and a click on a cell goes there.
 *
 * window.convresExplorers[id] exposes each explorer to the browser test (tests/test_site.py): its
 * data, its Vega views (and the overview's), `setPosition(key)`, `preset(id)`, `ghost()` (the key of
 * the faint trace) and `idle()`, a promise that resolves once the last move is drawn.
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
  // values below the chart's floor (if any) are drawn at the floor. ghost: rows of the previous
  // position (g: true), drawn faintly behind.
  function seriesRows(series, rec, floor, ghost) {
    var xs, ys;
    if (series.const_x) {
      var v = rec[series.y];
      if (v === undefined || v === null) return [];
      xs = series.const_x;
      ys = xs.map(function () { return v; });
    } else {
      ys = rec[series.y];
      if (!ys) return [];
      xs = seriesX(series, rec, ys);
    }
    var every = series.every || 1;
    return ys.map(function (y, i) {
      return {x: xs[i], y: floor === undefined || floor === null ? y : Math.max(y, floor), s: series.key,
              m: i % every === 0 || i === ys.length - 1, g: !!ghost};
    });
  }

  function seriesX(series, rec, ys) {
    if (series.x === 'index1') return ys.map(function (_, i) { return i + 1; });
    if (series.x === 'index0') return ys.map(function (_, i) { return i; });
    return rec[series.x];
  }

  // The rows of the overview panel at position `index` (convres.vega.overview_rows, in JavaScript).
  function overviewRows(data, index) {
    var kx = data.overview.x, ky = data.overview.y, rows = [];
    data.controls[kx].values.forEach(function (_, i) {
      data.controls[ky].values.forEach(function (_, j) {
        var at = index.slice();
        at[kx] = i;
        at[ky] = j;
        var key = at.join(','), rec = data.positions[key];
        rows.push({x: data.controls[kx].text[i], y: data.controls[ky].text[j], v: rec.cell_v,
                   t: rec.cell_text, cur: i === index[kx] && j === index[ky], key: key});
      });
    });
    return rows;
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

  function stripTags(html) { return html.replace(/<[^>]+>/g, ''); }

  function makeView(lib, spec, box) {
    return new lib.vega.View(lib.vega.parse(lib.vegaLite.compile(spec).spec),
                             {renderer: 'svg', container: box, hover: false});
  }

  // The pointer's position in the plot's coordinates (pixels from the plot's top left corner).
  function plotXY(view, box, ev) {
    var svg = box.querySelector('svg');
    if (!svg) return null;
    var r = svg.getBoundingClientRect();
    var k = (Number(svg.getAttribute('width')) || r.width) / r.width;
    var o = view.origin();
    var x = (ev.clientX - r.left) * k - o[0], y = (ev.clientY - r.top) * k - o[1];
    return x < 0 || y < 0 || x > view.width() || y > view.height() ? null : [x, y];
  }

  function build(root, lib) {
    var data = JSON.parse(root.querySelector('script.cx-data').textContent);
    var id = root.id;
    var fallback = root.querySelector('.cx-fallback');
    if (fallback) fallback.remove();
    var app = el('div', {'class': 'cx-app'});
    var presets = (data.presets || []).map(function (p) {
      return {def: p, button: el('button', {type: 'button', 'class': 'cx-preset', 'data-preset': p.id,
                                            'aria-pressed': 'false'}, p.label)};
    });
    var look = el('p', {'class': 'cx-look', 'aria-live': 'polite'});
    if (presets.length) {
      var bar = el('div', {'class': 'cx-presets', role: 'group', 'aria-label': data.title + ': presets'});
      bar.appendChild(el('span', {'class': 'cx-presets-title'}, 'Go to'));
      presets.forEach(function (p) { bar.appendChild(p.button); });
      app.appendChild(bar);
      app.appendChild(look);
    }
    var controls = el('div', {'class': 'cx-controls', role: 'group',
                              'aria-label': data.title + ': sliders'});
    var readout = el('p', {'class': 'cx-readout', 'aria-live': 'polite'});
    var ghostNote = el('p', {'class': 'cx-ghost-note'});
    app.appendChild(controls);
    app.appendChild(readout);
    app.appendChild(ghostNote);
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
      var hover = el('p', {'class': 'cx-hover', 'aria-hidden': 'true'});
      app.appendChild(box);
      app.appendChild(hover);
      return {def: c, view: makeView(lib, c.spec, box), box: box, hover: hover};
    });
    var overview = null;
    if (data.overview) {
      var kx = data.overview.x, ky = data.overview.y;
      var head = el('p', {'class': 'cx-overview-title'},
                    'The whole grid: every ' + data.controls[kx].label + ' and ' + data.controls[ky].label +
                    ' at the current ' + data.controls.filter(function (_, k) { return k !== kx && k !== ky; })
                      .map(function (c) { return c.label; }).join(', ') +
                    '; the outlined cell is the current setting. Click a cell to go there.');
      var obox = el('div', {'class': 'cx-chart cx-overview', 'data-chart': 'overview'});
      var ohover = el('p', {'class': 'cx-hover', 'aria-hidden': 'true'});
      app.appendChild(head);
      app.appendChild(obox);
      app.appendChild(ohover);
      overview = {view: makeView(lib, data.overview.spec, obox), box: obox, hover: ohover};
    }
    root.insertBefore(app, root.querySelector('script.cx-data'));

    var state = {busy: Promise.resolve(), drawn: 0, key: null, ghost: null};
    function describe(key) {
      return key.split(',').map(function (i, k) {
        return data.controls[k].label + ' = ' + data.controls[k].text[Number(i)];
      }).join(', ');
    }
    function clearHover(c) {
      c.hover.textContent = '';
      if (c.def) c.view.change('hover', lib.vega.changeset().remove(function () { return true; })).run();
    }
    function show() {
      index = inputs.map(function (s) { return Number(s.input.value); });
      var key = index.join(',');
      if (state.key !== null && key !== state.key) state.ghost = state.key;
      state.key = key;
      var rec = data.positions[key], ghost = state.ghost ? data.positions[state.ghost] : null;
      inputs.forEach(function (s, k) {
        var text = s.control.text[index[k]];
        s.output.textContent = text;
        s.input.setAttribute('aria-valuetext', s.control.name + ' = ' + text);
      });
      readout.innerHTML = readoutHTML(rec.readout);
      ghostNote.innerHTML = ghost ? '<span class="cx-ghost-swatch"></span> Faint lines: the previous ' +
        'setting, ' + describe(state.ghost) + '.' : '';
      var matching = presets.filter(function (p) { return p.def.key === key; });
      presets.forEach(function (p) { p.button.setAttribute('aria-pressed', String(p.def.key === key)); });
      look.innerHTML = matching.length ? matching[0].def.look : '';
      var runs = charts.map(function (c) {
        var rows = [];
        c.def.series.forEach(function (s) { rows = rows.concat(seriesRows(s, rec, c.def.floor, false)); });
        if (ghost) c.def.series.forEach(function (s) { rows = rows.concat(seriesRows(s, ghost, c.def.floor, true)); });
        c.view.signal('labels', rec.labels || {});
        c.view.change('table', lib.vega.changeset().remove(function () { return true; }).insert(rows));
        c.view.change('hover', lib.vega.changeset().remove(function () { return true; }));
        c.hover.textContent = '';
        return c.view.runAsync();
      });
      if (overview) {
        overview.view.change('table', lib.vega.changeset().remove(function () { return true; })
                                          .insert(overviewRows(data, index)));
        runs.push(overview.view.runAsync());
      }
      state.busy = Promise.all(runs).then(function () {
        root.dataset.position = key;
        root.dataset.ghost = state.ghost || '';
        state.drawn += 1;
        root.dataset.drawn = String(state.drawn);
      });
      return state.busy;
    }
    function setPosition(key) {
      key.split(',').forEach(function (i, k) { inputs[k].input.value = i; });
      return show();
    }
    inputs.forEach(function (s) { s.input.addEventListener('input', show); });
    presets.forEach(function (p) { p.button.addEventListener('click', function () { setPosition(p.def.key); }); });

    // Hover: the step (or index) nearest the pointer, the value of every series there.
    charts.forEach(function (c) {
      c.box.addEventListener('pointermove', function (ev) {
        var xy = plotXY(c.view, c.box, ev);
        if (!xy) { clearHover(c); return; }
        var xv = c.view.scale('x').invert(xy[0]), rec = data.positions[state.key], labels = rec.labels || {};
        var points = [];
        c.def.series.forEach(function (s) {
          var v = rec[s.y];
          if (v === undefined || v === null) return;
          if (s.const_x) { points.push({s: s.key, x: null, y: v}); return; }
          var xs = seriesX(s, rec, v), best = 0;
          xs.forEach(function (x, i) { if (Math.abs(x - xv) < Math.abs(xs[best] - xv)) best = i; });
          points.push({s: s.key, x: xs[best], y: v[best]});
        });
        var xs = points.filter(function (p) { return p.x !== null; }).map(function (p) { return p.x; });
        if (!xs.length) { clearHover(c); return; }
        var x0 = xs.reduce(function (a, b) { return Math.abs(b - xv) < Math.abs(a - xv) ? b : a; });
        var floor = c.def.floor;
        var rows = [{x: x0, rule: true}].concat(points.map(function (p) {
          var y = floor === undefined || floor === null ? p.y : Math.max(p.y, floor);
          return {x: p.x === null ? x0 : p.x, y: y, s: p.s, rule: false};
        }).filter(function (r) { return r.y > 0; }));
        c.view.change('hover', lib.vega.changeset().remove(function () { return true; }).insert(rows)).run();
        c.hover.innerHTML = c.def.x_name + ' = ' + x0 + ': ' + points.map(function (p) {
          var at = p.x !== null && p.x !== x0 ? ' (' + c.def.x_name + ' = ' + p.x + ')' : '';
          return stripTags(labels[p.s] || p.s) + at + ' <b>' + fmt(p.y) + '</b>';
        }).join('; ');
      });
      c.box.addEventListener('pointerleave', function () { clearHover(c); });
    });
    if (overview) {
      overview.view.addEventListener('click', function (ev, item) {
        if (item && item.datum && item.datum.key) setPosition(item.datum.key);
      });
      overview.view.addEventListener('pointermove', function (ev, item) {
        var d = item && item.datum;
        if (!d || !d.key) { overview.hover.textContent = ''; return; }
        var rec = data.positions[d.key];
        overview.hover.innerHTML = describe(d.key) + ': ' + (rec.end === null ? 'diverged' : '<b>' + fmt(rec.end) + '</b>');
      });
      overview.box.addEventListener('pointerleave', function () { overview.hover.textContent = ''; });
    }
    registry[id] = {
      data: data,
      views: charts.reduce(function (o, c) { o[c.def.name] = c.view; return o; }, {}),
      overview: overview ? overview.view : null,
      format: fmt,
      setPosition: setPosition,
      preset: function (name) {
        var p = presets.filter(function (q) { return q.def.id === name; })[0];
        if (!p) return Promise.reject(new Error(id + ': no preset ' + name));
        return setPosition(p.def.key);
      },
      ghost: function () { return state.ghost; },
      idle: function () { return state.busy; }
    };
    return show();
  }

  // A link of the prose to a preset (convres.vega.PresetLink): set the explorer, scroll to it.
  document.addEventListener('click', function (ev) {
    var a = ev.target && ev.target.closest ? ev.target.closest('a.cx-preset-link') : null;
    if (!a) return;
    var id = (a.getAttribute('href') || '').replace(/^#/, '');
    var target = document.getElementById(id);
    if (!target) return;
    ev.preventDefault();
    target.scrollIntoView({block: 'start'});
    Promise.resolve(window.convresExplorersReady).then(function () {
      var ex = registry[id];
      return ex ? ex.preset(a.getAttribute('data-cx-preset')) : null;
    }).catch(function (err) { console.error('convres explorer:', err); });
  });

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
