#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every link between the built site's pages leads somewhere: the page exists and, for a
link to a section (page.html#anchor), so does the anchor (MkDocs 1.4 checks pages, not
anchors).

    check_links.py SITE_DIR
"""
import glob
import html.parser
import os
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])


site = sys.argv[1]
pages = {}
for path in glob.glob(os.path.join(site, "**", "*.html"), recursive=True):
    p = Page()
    p.feed(open(path, encoding="utf-8").read())
    pages[os.path.normpath(path)] = p

bad, n = [], 0
for path, p in sorted(pages.items()):
    if os.path.basename(path) in ("404.html", "search.html"):
        continue
    for href in p.links:
        u = urllib.parse.urlsplit(href)
        if u.scheme or u.netloc or href.startswith("mailto:"):
            continue
        target = os.path.normpath(os.path.join(os.path.dirname(path), u.path)) if u.path else path
        if u.path.endswith("/") or os.path.isdir(target):
            target = os.path.join(target, "index.html")
        n += 1
        where = os.path.relpath(path, site)
        if not target.endswith(".html"):
            if not os.path.exists(target):
                bad.append(f"{where}: {href}: no such file")
            continue
        if target not in pages:
            bad.append(f"{where}: {href}: no such page")
        elif u.fragment and urllib.parse.unquote(u.fragment) not in pages[target].ids:
            bad.append(f"{where}: {href}: no such section in {os.path.relpath(target, site)}")

for b in bad:
    print("FAIL:", b)
if not bad:
    print(f"PASS: {n} links between {len(pages)} pages lead to existing pages and sections")
sys.exit(1 if bad else 0)
