/* The text on a phone, and the folds (web/convres_site.py loads this on every page, with site.css).
 *
 * Tables: a table written in a page (class "table"; not a notebook's data frame) that does not fit
 * the column on a narrow screen is shown as one card per row, each cell labelled with the header of
 * its column (site.css, ".convres-cards"), instead of scrolling sideways. On a wide screen a table
 * (of the text or a notebook's) wider than the column gets smaller type and tighter cells
 * (".convres-dense"), and if that is not enough, cells whose words may break (".convres-denser").
 *
 * Inline formulas: MathJax cannot break a formula inside a line, so one that is wider than the
 * line it sits in (the column, a card, a box) would be cut off at the right edge. Each such formula
 * is shown on a line of its own that scrolls sideways inside the formula (site.css,
 * ".convres-wide-math"); the page itself never does. The line shows that it scrolls (a fade at the
 * edge where more of the formula is hidden, and a thin scrollbar), and the punctuation after the
 * formula stays on its line (".convres-wide-line").
 *
 * Both are checked once MathJax has typeset the page (formulas change the widths) and again when
 * the window is resized.
 *
 * Display formulas broken for a phone only: `\phonebreak` in an aligned environment is a new line
 * (indented by a quad from the `&` column) on a narrow screen and nothing on a wide one (the macro is defined before MathJax
 * starts, by the inline script of web/convres_site.py, from the same 36rem media query as
 * site.css). When the window crosses that width, the formulas that use it are typeset again.
 *
 * Folded proofs: the fold's label names what it proves ("Proof of Lemma 3", from the numbered
 * statement just before the fold) instead of sphinx-togglebutton's "Click to show".
 */
(function () {
  'use strict';
  var NARROW = 576;  // px, the width up to which site.css styles .convres-cards (36rem)

  function label(table) {
    var heads = Array.prototype.map.call(table.querySelectorAll('thead th'),
                                         function (th) { return th.textContent.trim(); });
    Array.prototype.forEach.call(table.querySelectorAll('tbody tr'), function (row) {
      Array.prototype.forEach.call(row.children, function (cell, k) {
        if (heads[k]) cell.setAttribute('data-label', heads[k]);
      });
    });
  }

  function fitTables() {
    // wider than the column on a wide screen: smaller type and tighter cells, whose text may wrap
    // anywhere as a last resort (a table of the text or a notebook's), instead of scrolling sideways
    var all = document.querySelectorAll('.bd-article table.table, .bd-article div.cell_output table');
    Array.prototype.forEach.call(all, function (table) {
      table.classList.remove('convres-dense', 'convres-denser');
      if (window.innerWidth <= NARROW) return;
      var box = table.parentElement;
      if (table.scrollWidth <= box.clientWidth + 1) return;
      table.classList.add('convres-dense');
      if (table.scrollWidth > box.clientWidth + 1) table.classList.add('convres-denser');
    });
    var tables = document.querySelectorAll('.bd-article table.table');
    Array.prototype.forEach.call(tables, function (table) {
      table.classList.remove('convres-cards');
      if (window.innerWidth > NARROW || !table.querySelector('thead th')) return;
      var box = table.parentElement;
      if (table.scrollWidth > box.clientWidth + 1) {
        label(table);
        table.classList.add('convres-cards');
      }
    });
  }

  // The width a line of text has inside the nearest block around `node` (its content box).
  function lineWidth(node) {
    for (var a = node.parentElement; a; a = a.parentElement) {
      var s = getComputedStyle(a);
      if (s.display.indexOf('inline') !== 0 && s.display !== 'contents') {
        return a.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
      }
    }
    return window.innerWidth;
  }

  // A wide formula's line: the formula and the punctuation that follows it in the text ("." or
  // ", "), kept together (the punctuation would otherwise start a line of its own).
  var PUNCT = /^[.,;:!?)\u2019\u201d]+/;
  function keepPunctuation(c) {
    // the formula with the inline elements around it that hold nothing else (Sphinx's span.math)
    var unit = c;
    while (unit.parentNode && unit.parentNode.matches('span, em, strong, a') &&
           unit.parentNode.textContent.trim() === unit.textContent.trim()) unit = unit.parentNode;
    var next = unit.nextSibling, m = next && next.nodeType === 3 ? PUNCT.exec(next.data) : null;
    var line = document.createElement('span');
    line.className = 'convres-wide-line';
    unit.parentNode.insertBefore(line, unit);
    line.appendChild(unit);
    if (m) {
      var p = document.createElement('span');
      p.className = 'convres-wide-punct';
      p.textContent = m[0];
      next.data = next.data.slice(m[0].length);
      line.appendChild(p);
    }
  }
  function unwrap(line) {
    var parent = line.parentNode, p = line.querySelector('.convres-wide-punct');
    while (line.firstChild && line.firstChild !== p) parent.insertBefore(line.firstChild, line);
    if (p) {
      var next = line.nextSibling;
      if (next && next.nodeType === 3) next.data = p.textContent + next.data;
      else parent.insertBefore(document.createTextNode(p.textContent), next);
    }
    parent.removeChild(line);
  }
  // The fades at the edges of a wide formula: at the right while more of it is to the right, at
  // the left once it is scrolled.
  function edges(c) {
    c.classList.toggle('convres-more-right', c.scrollLeft + c.clientWidth < c.scrollWidth - 1);
    c.classList.toggle('convres-more-left', c.scrollLeft > 1);
  }
  function onScroll(ev) { edges(ev.currentTarget); }

  function fitMath() {
    var inline = document.querySelectorAll('.bd-article mjx-container:not([display="true"])');
    document.querySelectorAll('.bd-article .convres-wide-line').forEach(unwrap);
    Array.prototype.forEach.call(inline, function (c) {
      c.classList.remove('convres-wide-math', 'convres-more-right', 'convres-more-left');
    });
    Array.prototype.forEach.call(inline, function (c) {
      var math = c.firstElementChild || c;
      if (math.getBoundingClientRect().width > lineWidth(c) + 1) {
        keepPunctuation(c);
        c.classList.add('convres-wide-math');
        c.removeEventListener('scroll', onScroll);
        c.addEventListener('scroll', onScroll, {passive: true});
        edges(c);
      }
    });
  }

  function fit() {
    fitTables();
    fitMath();
  }

  function afterMath() {
    fit();
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(fit);
  }

  // --- \phonebreak: the formulas that use it, typeset again when the screen class changes
  var PHONE = window.matchMedia('(max-width: 36rem)');
  var phoneTex = new Map();   // element of the formula -> its TeX as written (with \phonebreak)

  function rebreak() {
    var mj = window.MathJax;
    if (!mj || !mj.startup || !mj.startup.document || !mj.typesetPromise) return;
    var article = document.querySelector('.bd-article') || document.body;
    var boxes = [];
    mj.startup.document.getMathItemsWithin(article).forEach(function (item) {
      var root = item.typesetRoot, box = root && root.parentNode;
      if (!box || !(phoneTex.has(box) || item.math.indexOf('\\phonebreak') >= 0)) return;
      if (!phoneTex.has(box)) phoneTex.set(box, item.math);
      var tex = phoneTex.get(box).replace(/\\phonebreak/g, PHONE.matches ? '\\\\ &\\quad ' : '');
      box.classList.add('convres-phonebreak');
      mj.typesetClear([box]);
      root.replaceWith(document.createTextNode(item.display ? '\\[' + tex + '\\]' : '\\(' + tex + '\\)'));
      boxes.push(box);
    });
    if (boxes.length) mj.typesetPromise(boxes).then(fit);
  }

  // --- folded proofs: "Proof of Lemma 3" instead of "Click to show"
  var STATEMENTS = 'div.admonition.theorem, div.admonition.lemma, div.admonition.proposition, ' +
    'div.admonition.corollary, div.admonition.definition, div.admonition.conjecture, ' +
    'div.admonition.claim, div.admonition.property, div.admonition.observation';

  function provedBy(fold) {
    // the numbered statement just before the fold (other text may stand between them), unless
    // another proof comes first; the proof's own "We prove Theorem 2" wins over both
    var proof = fold.querySelector('div.proof');
    var first = proof && proof.querySelector('p');
    var m = first && /^Proof\.\s+We prove\s+(\S+\s+\d+)/.exec(first.textContent);
    if (m) return m[1];
    // (sphinx-proof gives statements and proofs alike the class "proof": "proof lemma
    // admonition", "proof admonition", so statements are tested first)
    for (var e = fold.previousElementSibling; e; e = e.previousElementSibling) {
      if (e.matches(STATEMENTS)) {
        var n = e.querySelector(':scope > p.admonition-title > span.caption-number');
        return n ? n.textContent.trim() : null;
      }
      if (e.matches('details.toggle-details, div.proof, h1, h2, h3, h4, section')) return null;
    }
    return null;
  }

  function labelProofs() {
    document.querySelectorAll('details.toggle-details').forEach(function (fold) {
      if (!fold.querySelector('div.proof') || fold.querySelector('.convres-fold-label')) return;
      var summary = fold.querySelector('summary'), what = provedBy(fold);
      if (!summary) return;
      var label = document.createElement('span');
      label.className = 'convres-fold-label';
      label.textContent = what ? 'Proof of ' + what : 'Proof';
      summary.appendChild(label);
      fold.classList.add('convres-labelled');
    });
  }

  // after sphinx-togglebutton has built the folds: its script (not deferred) registers its
  // DOMContentLoaded handler before this deferred one runs, so that handler runs first; this
  // script runs while the state is already 'interactive', before DOMContentLoaded. 'load' is a
  // second chance (labelling twice does nothing).
  if (document.readyState === 'complete') labelProofs();
  else {
    document.addEventListener('DOMContentLoaded', labelProofs);
    window.addEventListener('load', labelProofs);
  }
  PHONE.addEventListener('change', rebreak);

  if (document.readyState === 'complete') afterMath();
  else window.addEventListener('load', afterMath);
  window.addEventListener('resize', fit);
  // a folded proof or dropdown opened later: its formulas are measured when they are shown
  document.addEventListener('click', function () { setTimeout(fitMath, 0); });
  window.convresFit = fit;
})();
