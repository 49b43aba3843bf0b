/* The search page's ranking (Sphinx's `html_search_scorer`, set by web/convres_site.py; Sphinx
 * puts this file into language_data.js, which search.html loads with searchtools.js).
 *
 * Sphinx ranks an API object whose name matches a word of the query (a module `convres.collapse`
 * for "rank collapse", 26 points) above a chapter with the words in its title (15). A reader who
 * types words looks for the book's explanation first: for a query in words, every result outside
 * the API reference is placed above every API result. A query that looks like code (a dot, an
 * underscore or a parenthesis: `gradient_descent`, `convres.certify`) keeps Sphinx's order, API
 * objects first.
 *
 * Among the chapters, Sphinx gives the same points to a word in a chapter's title and a word in any
 * of its section titles, and breaks ties alphabetically ("certificate" found "A width theorem"
 * first). So a chapter named by the query comes first: +20 when a word of the query is a word of
 * the page's name (`certificate.html`), +10 when it begins a word of the chapter's own title
 * ("Certified constants ..."; six letters in common suffice: "certificate", "certified"). The
 * developers' build status page comes after the other pages.
 *
 * The weights are Sphinx's defaults (searchtools.js), written out because this object replaces its.
 */
var Scorer = {
  score: function (result) {
    var docname = result[0], score = result[4];
    var query = (new URLSearchParams(window.location.search).get('q') || '').toLowerCase();
    var api = docname === 'api' || docname.indexOf('api/') === 0 ||
      docname === 'genindex' || docname === 'py-modindex';
    if (/[._()]/.test(query) || api) return score;
    return score + 1000 + Scorer.named(query.split(/\s+/).filter(Boolean), docname,
                                       String(result[1] || '').split(' > ')[0]);
  },
  // the points for a chapter named by the query (see above)
  named: function (words, docname, title) {
    var same = function (a, b) {
      var n = 0;
      while (n < a.length && n < b.length && a[n] === b[n]) n++;
      return n === a.length || n === b.length || n >= 6;
    };
    var parts = docname.toLowerCase().split(/[_/]/), titleWords = title.toLowerCase().split(/[^a-z0-9]+/);
    var points = docname === 'status' ? -50 : 0;
    words.forEach(function (w) {
      if (parts.indexOf(w) >= 0) points += 20;
      if (w.length > 3 && titleWords.some(function (t) { return t.length > 3 && same(w, t); })) points += 10;
    });
    return points;
  },
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: {0: 15, 1: 5, 2: -5},
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2
};
