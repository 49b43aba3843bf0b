"""Every link out of the book goes to the one configured repository (``repository.url`` in
``_config.yml``) or to a host in ``KNOWN_HOSTS``; Binder links open an existing chapter of it at
the configured branch; the README links the same repository and no placeholder is left. The site
checks are skipped without a built site, unless ``CONVRES_SITE_REQUIRED=1``."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("CONVRES_SITE_DIR", ROOT / "_build" / "html")).resolve()

# Hosts the book may link besides its repository: the paper, DOIs, Binder, the data's sources.
KNOWN_HOSTS = {"arxiv.org", "doi.org", "dx.doi.org", "mybinder.org", "www.bgc-jena.mpg.de",
               "huggingface.co", "storage.googleapis.com", "gluebenchmark.com",
               "nlp.stanford.edu", "pytorch.org"}

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO = CONFIG["repository"]
REPO_URL = REPO["url"].rstrip("/")
BRANCH = REPO.get("branch", "main")
BOOK_PATH = REPO.get("path_to_book", "book").strip("/")


def external_links(page: str) -> list[str]:
    text = (SITE / page).read_text(encoding="utf-8", errors="replace")
    return [html.unescape(h) for h in re.findall(r'<a\s[^>]*?href="(https?://[^"]+)"', text)]


def binder_target(url: str) -> tuple[str, str, str] | None:
    """``(owner/name, branch, path)`` a mybinder.org launch link opens, or None for another link."""
    parts = urlsplit(url)
    m = re.fullmatch(r"/v2/gh/([^/]+/[^/]+)/([^/?]+)/?", parts.path)
    if parts.hostname != "mybinder.org" or not m:
        return None
    urlpath = parse_qs(parts.query).get("urlpath", [""])[0]
    path = re.sub(r"^(lab/tree|tree|notebooks)/", "", urlpath)
    return m.group(1), m.group(2), path


def _repo_slug() -> str:
    parts = urlsplit(REPO_URL)
    assert parts.hostname == "github.com", f"repository.url {REPO_URL} is not a GitHub address"
    return parts.path.strip("/")


def link_problems(url: str, any_host: bool = False) -> list[str]:
    """What is wrong with a link out of the book: a Binder link that opens no file of the book in the
    repository at the configured branch, a GitHub address outside the repository, a host not in
    KNOWN_HOSTS (unless ``any_host``)."""
    host, target = urlsplit(url).hostname or "", binder_target(url)
    if target is not None:
        repo, branch, path = target
        problems = []
        if (repo, branch) != (_repo_slug(), BRANCH):
            problems.append(f"{url} opens {repo}@{branch}, not {_repo_slug()}@{BRANCH}")
        if not path.startswith(BOOK_PATH + "/") or not (ROOT / path).is_file():
            problems.append(f"{url} opens {path or 'no file'}, which is not a file of the book")
        return problems
    if url == REPO_URL or url.startswith((REPO_URL + "/", REPO_URL + "?")):
        return []
    if host == "github.com":
        return [f"{url} is on GitHub but not in {REPO_URL}"]
    return [] if any_host or host in KNOWN_HOSTS else [f"{url} (host {host} is not in KNOWN_HOSTS)"]


def test_links_out_of_the_site_and_its_binder_buttons(site_pages):
    """Every link out goes to the repository or a known host; each page's Binder button opens that
    page's own chapter."""
    problems, binder = [], 0
    for page in site_pages:
        for url in external_links(page):
            problems += [f"{page}: {p}" for p in link_problems(url)]
            target = binder_target(url)
            if target is None:
                continue
            binder += 1
            rel = Path(target[2].removeprefix(BOOK_PATH + "/"))
            if rel.with_suffix(".html").as_posix() not in site_pages:
                problems.append(f"{page}: {url} opens {rel}, which is not a page of the site")
            elif rel.stem != Path(page).stem:
                problems.append(f"{page}: its Binder button opens another chapter ({rel})")
    assert binder, "no Binder link in the built site (launch_buttons in _config.yml?)"
    assert not problems, "\n  ".join(["links out of the book:"] + sorted(set(problems)))


def test_the_site_links_the_configured_repository(site_pages):
    assert "intro.html" in site_pages, "no intro.html"
    text = (SITE / "intro.html").read_text(encoding="utf-8")
    assert f"git clone {REPO_URL}" in html.unescape(re.sub(r"<[^>]+>", "", text)), \
        f"intro.html: no `git clone {REPO_URL}` (is {{{{ repository_url }}}} replaced?)"
    assert "{{ repository_url }}" not in text, "intro.html: the placeholder was not replaced"
    assert any(u == REPO_URL for u in external_links("intro.html")), \
        f"intro.html: no button or link to {REPO_URL}"


def test_readme_and_sources_use_the_configured_repository():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    problems = []
    for url in re.findall(r"https?://[^\s)>\]\"'`]+", readme):
        problems += [f"README: {p}" for p in link_problems(url.rstrip(".,;:"), any_host=True)]
    if REPO_URL not in readme:
        problems.append(f"README: never names the repository {REPO_URL}")
    placeholder = re.compile(r"<(this|the) repo(sitory)?>|git clone <", re.I)
    for path in [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]:
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if placeholder.search(line):
                problems.append(f"{path.relative_to(ROOT)}:{k}: placeholder: {line.strip()}")
    assert not problems, "\n  ".join(problems)


def test_binder_target_reads_launch_links():
    url = "https://mybinder.org/v2/gh/a/b/main?urlpath=lab/tree/book/model.md"
    assert binder_target(url) == ("a/b", "main", "book/model.md")
    assert binder_target("https://mybinder.org") is None
    assert binder_target("https://arxiv.org/abs/2506.05249") is None
