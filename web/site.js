/* Tables of the text on a phone (web/convres_site.py loads this on every page, with site.css).
 *
 * A table written in a page (class "table"; not a notebook's data frame) that does not fit the
 * column on a narrow screen is shown as one card per row, each cell labelled with the header of
 * its column (site.css, ".convres-cards"), instead of scrolling sideways. Checked again once
 * MathJax has typeset the page (formulas change the widths) and when the window is resized.
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

  function fit() {
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

  function afterMath() {
    fit();
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(fit);
  }

  if (document.readyState === 'complete') afterMath();
  else window.addEventListener('load', afterMath);
  window.addEventListener('resize', fit);
})();
