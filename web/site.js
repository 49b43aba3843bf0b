/* The text on a phone (web/convres_site.py loads this on every page, with site.css).
 *
 * Tables: a table written in a page (class "table"; not a notebook's data frame) that does not fit
 * the column on a narrow screen is shown as one card per row, each cell labelled with the header of
 * its column (site.css, ".convres-cards"), instead of scrolling sideways.
 *
 * Inline formulas: MathJax cannot break a formula inside a line, so one that is wider than the
 * line it sits in (the column, a card, a box) would be cut off at the right edge. Each such formula
 * is shown on a line of its own that scrolls sideways inside the formula (site.css,
 * ".convres-wide-math"); the page itself never does.
 *
 * Both are checked once MathJax has typeset the page (formulas change the widths) and again when
 * the window is resized.
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

  function fitMath() {
    var inline = document.querySelectorAll('.bd-article mjx-container:not([display="true"])');
    Array.prototype.forEach.call(inline, function (c) { c.classList.remove('convres-wide-math'); });
    Array.prototype.forEach.call(inline, function (c) {
      var math = c.firstElementChild || c;
      if (math.getBoundingClientRect().width > lineWidth(c) + 1) c.classList.add('convres-wide-math');
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

  if (document.readyState === 'complete') afterMath();
  else window.addEventListener('load', afterMath);
  window.addEventListener('resize', fit);
  // a folded proof or dropdown opened later: its formulas are measured when they are shown
  document.addEventListener('click', function () { setTimeout(fitMath, 0); });
  window.convresFit = fit;
})();
