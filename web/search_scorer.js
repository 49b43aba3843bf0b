/* The search page's ranking (Sphinx's `html_search_scorer`, set by web/convres_site.py; Sphinx
 * puts this file into language_data.js, which search.html loads with searchtools.js).
 *
 * Sphinx ranks an API object whose name matches a word of the query (a module `convres.collapse`
 * for "rank collapse", 26 points) above a chapter with the words in its title (15). A reader who
 * types words looks for the book's explanation first: for a query in words, every result outside
 * the API reference is placed above every API result, each group in Sphinx's own order. A query
 * that looks like code (a dot, an underscore or a parenthesis: `gradient_descent`,
 * `convres.certify`) keeps Sphinx's order, API objects first.
 *
 * The weights are Sphinx's defaults (searchtools.js), written out because this object replaces its.
 */
var Scorer = {
  score: function (result) {
    var docname = result[0], score = result[4];
    var query = new URLSearchParams(window.location.search).get('q') || '';
    var api = docname === 'api' || docname.indexOf('api/') === 0 ||
      docname === 'genindex' || docname === 'py-modindex';
    return /[._()]/.test(query) || api ? score : score + 1000;
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
