"""The ``de-en`` data recipe: German→English sentence pairs built from Debian packages.

Where the pairs come from (everything is an ordinary Debian package, fetched with ``apt-get download`` and
unpacked with ``dpkg -x``; nothing is installed and no root is needed):

1. ``trans-de-en`` -- the Ding German-English dictionary (TU Chemnitz, GPL-2+). Its file ``usr/share/trans/de-en``
   has one entry a line, ``german | german :: english | english``: the ``|``-separated parts are aligned
   on both sides, and many parts are example *sentences* ("Er ließ sich leicht überreden." :: "He was easily
   persuaded."). We keep the parts whose two sides are both full sentences -- about 18,000 natural pairs.
   All of valid and test are drawn from these.
2. gettext message catalogs (``.mo`` files) of programs translated into German: LibreOffice, GCC, git, GIMP,
   Evolution. Each English message (``msgid``) and its German translation (``msgstr``) is a pair. User-interface
   text is a different register from the dictionary sentences, but it adds volume: about 36,000 clean pairs
   once placeholders, markup, URLs and the like are filtered out (see :func:`clean_catalog_pair`).
3. Debian's package descriptions, German (DDTP translations, ``Translation-de``) against English
   (``Translation-en``), aligned by description md5 down to sentences: about 45,000 pairs of natural technical
   prose (see :mod:`attnkit.data.corpora.debian_descriptions`), grouped by source package.
4. LibreOffice's offline help, German (``libreoffice-help-de``) against English (``libreoffice-help-en-us``),
   aligned by page and paragraph id down to sentences: about 43,000 pairs of natural instructions
   (see :mod:`attnkit.data.corpora.libreoffice_help`).
5. Man pages, German (``manpages-de``, ``manpages-de-dev``, and the German pages of Debian's own tools: apt,
   dpkg, debhelper, devscripts …) against English (``manpages``, ``manpages-dev`` and the packages that own the
   other translated pages: coreutils, util-linux, systemd …), aligned by page, section and paragraph: about
   43,000 pairs (see :mod:`attnkit.data.corpora.man_pages`).
6. GNOME's desktop and application help (``gnome-user-docs``, ``evince-common`` …, Mallard pages, aligned by page
   and text block: about 6,700 pairs,
   see :mod:`attnkit.data.corpora.gnome_help`) and Debian's manuals -- the Debian reference, the New Maintainers' Guide
   and the Developer's Reference -- German against English HTML, aligned by section id and block: about 8,700
   pairs (see :mod:`attnkit.data.corpora.html_manuals`).
7. The campaigns of the game "The Battle for Wesnoth" (``wesnoth-1.16-httt``, ``-utbs`` … sixteen packages, GPL-2+):
   their German message catalogs hold the campaigns' dialogue and narration, split into sentences: about 16,000
   pairs of natural, everyday and literary sentences ("Let us return to the village."), the register closest
   to the dictionary's example sentences of everything here (see :func:`story_pairs`).

Split: a seeded shuffle of the (deduplicated) dictionary sentences gives 2,000 test and 1,000 valid pairs whose
strings are all distinct. A second test set, ``test-docs``, holds 2,000 natural full sentences (at least five
words, ending in ``.!?``, both sides) from package descriptions, held out by whole source package: no other pair
of those packages goes to train. Every train pair sharing a source or a target string with valid, test or
test-docs (compared case-insensitively) is removed, so nothing of the evaluation sets is ever seen in training.

Mixing: the dictionary sentences are the register of the Ding test; they are repeated ``DING_WEIGHT`` times in
``train.tsv`` instead of entering in the proportion they happen to have (recorded in ``SOURCE.json``).
``in-domain.tsv`` holds the training pairs of that register once each (the dictionary sentences and the
Wesnoth dialogue, about 31,000): ``attnkit train mt --anneal-data de-en`` trains on them only for the end of
its budget (``attnkit.training.mt_task``).

Output, in the recipe folder ``$ATTNKIT_HOME/data/de-en`` (default ``~/.cache/attnkit/data/de-en``):
``train.tsv``, ``valid.tsv``, ``test.tsv``, ``test-docs.tsv``, ``in-domain.tsv`` (``german<TAB>english``, one pair a
line) and
``SOURCE.json`` (counts per source, package versions and licenses, sha256 of each ``.deb``, of each apt index and
of each output). The downloaded ``.debs`` stay in ``debs/`` and the apt indexes in ``apt/``, so a rebuild needs no
network. A second call returns the cached folder; ``force=True``
rebuilds everything from the cached packages and indexes, fetching again only those that fail their pinned sha256.

Integrity: ``apt-get`` checks each ``.deb`` against the archive's signed package lists, and the recipe pins each
package's version and sha256 (:data:`KNOWN_DEBS`) and the two translation indexes' sha256 (:data:`KNOWN_INDEXES`).
The Debian archive only keeps the latest point release of a package: when the mirror has moved on, the recipe
stops with an error naming what changed instead of building different data. Everything used is recorded in
``SOURCE.json``.

There are no tensor axes in this file.
"""

from __future__ import annotations

import codecs
import collections
import random
import re
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from attnkit.data.corpora import debian_descriptions, gnome_help, html_manuals, libreoffice_help, man_pages
from attnkit.data.fetch import (FetchError, apt_download, dpkg_extract, sha256_file, verified_record,
                                write_source_record)
from attnkit.data.corpora.pair_filters import admit_blocks, is_full_sentence
from attnkit.data.corpora.parallel import IN_DOMAIN_FILE, SPLITS, normalize_text, write_tsv
from attnkit.data.corpora.registry import register

__all__ = [
    "CatalogEntry",
    "DebSource",
    "PACKAGES",
    "KNOWN_DEBS",
    "KNOWN_INDEXES",
    "ding_pairs",
    "ding_entries",
    "ding_part",
    "read_mo",
    "clean_catalog_pair",
    "catalog_pairs",
    "story_pairs",
    "split_pairs",
    "hold_out_documents",
    "remove_overlap",
    "prepare_de_en",
]

N_TEST = 2000
N_VALID = 1000
N_TEST_DOCS = 2000
DING_WEIGHT = 3  # times each dictionary sentence appears in train.tsv
SPLIT_SEED = 20240611
MAX_CHARS = 400  # longer catalog messages are help paragraphs, not sentences
# Bump when the extraction, cleaning or split rules change: a cache built by another version is rebuilt.
RECIPE_VERSION = 10


@dataclass(frozen=True)
class DebSource:
    """A Debian package the recipe reads, its license, and what is read from it."""

    package: str
    license: str
    kind: str  # "ding" (dictionary), "gettext" (.mo catalogs), "story" (.mo catalogs of prose), "help-de"/"help-en"
    #            (LibreOffice help), "man-de"/"man-en", "man-owner", "gnome", "manual-de"/"manual-en"
    globs: tuple[str, ...]  # paths inside the package, relative to its root


# The globs several packages share.
_LOCALE_DE = ("usr/share/locale/de/LC_MESSAGES/*.mo",)  # gettext catalogs
_MAN_DE = ("usr/share/man/de/man*/*",)  # German manual pages
_MAN_EN = ("usr/share/man/man*/*",)  # English manual pages
_GNOME_HELP = ("usr/share/help/C/*/*.page", "usr/share/help/de/*/*.page")  # English (C) and German Mallard pages

# Download sizes (Debian 12 "bookworm", amd64) are given for orientation: about 230 MB in all (the Wesnoth
# campaigns are 131 MB of it: their maps, images and sounds come with the catalogs).
PACKAGES: tuple[DebSource, ...] = (
    DebSource("trans-de-en", "GPL-2+", "ding", ("usr/share/trans/de-en",)),  # 6.3 MB
    # LibreOffice keeps its catalogs outside /usr/share/locale.
    DebSource("libreoffice-l10n-de", "MPL-2.0", "gettext",
              ("usr/lib/libreoffice/program/resource/de/LC_MESSAGES/*.mo",)),  # 0.9 MB
    # Programs whose German catalogs are in /usr/share/locale/de.
    *(DebSource(package, license, "gettext", _LOCALE_DE) for package, license in (
        ("gcc-12-locales", "GPL-3+"),  # 1.8 MB
        ("git", "GPL-2"),  # 7.3 MB
        ("gimp-data", "GPL-3+"),  # 14.2 MB
        ("evolution-common", "LGPL-2 or LGPL-3"),  # 8.5 MB
    )),
    DebSource("libreoffice-help-de", "MPL-2.0", "help-de", ("usr/share/libreoffice/help/de/text/**/*.html",)),  # 3.3 MB
    DebSource("libreoffice-help-en-us", "MPL-2.0", "help-en",
              ("usr/share/libreoffice/help/en-US/text/**/*.html",)),  # 1.8 MB
    DebSource("manpages-de", "GPL-3+ (translations)", "man-de", _MAN_DE),  # 3.6 MB
    DebSource("manpages-de-dev", "GPL-3+ (translations)", "man-de", _MAN_DE),  # 1.1 MB
    DebSource("manpages", "Linux man-pages copyleft and others", "man-en", _MAN_EN),  # 1.3 MB
    DebSource("manpages-dev", "Linux man-pages copyleft and others", "man-en", _MAN_EN),  # 2.0 MB
    # The packages that own the English originals of more pages manpages-de translates (and whose own German
    # pages, as in apt, dpkg, debhelper and devscripts, are translated with po4a by the Debian teams): ~22 MB.
    *(DebSource(package, license, "man-owner", _MAN_EN) for package, license in (
        ("systemd", "LGPL-2.1+"),
        ("util-linux", "GPL-2+ and others"),
        ("devscripts", "GPL-2+"),
        ("coreutils", "GPL-3+"),
        ("dpkg-dev", "GPL-2+"),
        ("mount", "GPL-2+"),
        ("apt", "GPL-2+"),
        ("debhelper", "GPL-2+"),
        ("dpkg", "GPL-2+"),
        ("less", "GPL-3+ or BSD-2-clause (less licence)"),
        ("xz-utils", "public domain, GPL-2+, LGPL-2.1+"),
        ("procps", "GPL-2+, LGPL-2+"),
        ("findutils", "GPL-3+"),
        ("fdisk", "GPL-2+"),
        ("tar", "GPL-3+"),
        ("bsdextrautils", "GPL-2+, BSD"),
        ("bsdutils", "GPL-2+, BSD"),
        ("passwd", "BSD-3-clause (shadow)"),
        ("gzip", "GPL-3+"),
        ("grep", "GPL-3+"),
        ("bzip2", "BSD-style (bzip2 licence)"),
        ("psmisc", "GPL-2+"),
        ("cron", "Paul Vixie's licence (ISC-style)"),
        ("diffutils", "GPL-3+"),
        ("debianutils", "GPL-2+"),
        ("e2fsprogs", "GPL-2"),
        ("sed", "GPL-3+"),
        ("login", "BSD-3-clause (shadow)"),
        ("man-db", "GPL-2+"),
        ("kmod", "LGPL-2.1+, GPL-2+"),
    )),
    # GNOME's desktop help, English (C) and German Mallard pages in one package: 8.5 MB.
    DebSource("gnome-user-docs", "CC-BY-SA-3.0", "gnome", _GNOME_HELP),
    # GNOME applications' own help, in the same layout (each page says CC-BY-SA 3.0): 11.3 MB.
    *(DebSource(package, "CC-BY-SA-3.0 (the help pages)", "gnome", _GNOME_HELP)
      for package in ("evince-common", "seahorse", "gnome-terminal-data", "eog", "gnome-calculator", "file-roller",
                      "epiphany-browser-data", "gnome-system-monitor", "totem-common", "cheese-common", "simple-scan",
                      "gnome-clocks", "baobab")),
    # Debian's manuals, translated with po4a / Sphinx gettext: 7.1 MB.
    DebSource("debian-reference-de", "GPL-2+", "manual-de", ("usr/share/debian-reference/*.de.html",)),
    DebSource("debian-reference-en", "GPL-2+", "manual-en", ("usr/share/debian-reference/*.en.html",)),
    DebSource("maint-guide-de", "MIT (Expat)", "manual-de", ("usr/share/doc/maint-guide-de/html/*.de.html",)),
    DebSource("maint-guide", "MIT (Expat)", "manual-en", ("usr/share/doc/maint-guide/html/*.en.html",)),
    DebSource("developers-reference-de", "MIT (Expat)", "manual-de", ("usr/share/developers-reference/de/*.html",)),
    DebSource("developers-reference", "MIT (Expat)", "manual-en", ("usr/share/developers-reference/*.html",)),
    # The Battle for Wesnoth's campaigns: each package holds one campaign and its catalogs in every language.
    *(DebSource(f"wesnoth-1.16-{campaign}", "GPL-2+", "story",
                ("usr/share/games/wesnoth/1.16/locale/de/LC_MESSAGES/*.mo",))
      for campaign in ("did", "dm", "dw", "ei", "httt", "l", "low", "nr", "sof", "sota", "sotbe", "thot", "trow", "tsg",
                       "ttb", "utbs")),
)
# Manual pages that are not chapters: the whole book on one page (a duplicate of the chapters), search, index.
_MANUAL_SKIP = frozenset(("developers-reference", "search", "genindex"))


def _manual_page(package: str, path: Path) -> tuple[str, str] | None:
    """``(manual, page)`` of a manual's HTML file (``debian-reference-de``, ``ch02.de.html`` → ``("debian-reference",
    "ch02")``), the same for both languages; None for pages that are not chapters."""
    manual = package.removesuffix("-de").removesuffix("-en")
    page = path.name.removesuffix(".html").removesuffix(".de").removesuffix(".en")
    return None if page in _MANUAL_SKIP else (manual, page)


# The version and sha256 of every package the recipe was built and checked with (Debian 12 "bookworm", amd64).
# A mirror that no longer offers a version fails with a clear error naming it (see apt_download).
KNOWN_DEBS: dict[str, tuple[str, str]] = {
    "trans-de-en": ("1.9-6", "45f6b4cf1c434776fba6811d7bc522efabb5425c43ba8afd0e289bf9e2e53df4"),
    "libreoffice-l10n-de": ("4:7.4.7-1+deb12u14", "aee22c8e3b3c0431f6e1b0bc66f757ba36c860e2651a05eb050fde4897f06548"),
    "gcc-12-locales": ("12.2.0-14+deb12u1", "a701516b5e34086f478b0a329dfd9dd8e1695e8bac5917a6b162a87719abe28f"),
    "git": ("1:2.39.5-0+deb12u3", "637a85ddd6247fab13bdd0592f2f39aff04ce4dbf0655d3ab553ac359a38ce6f"),
    "gimp-data": ("2.10.34-1+deb12u10", "89007a69d4ef2b0440e5419e75d4112cfd1c49e97db38220d210b9f86322be7c"),
    "evolution-common": ("3.46.4-2+deb12u1", "52e3a67ba3f2815fa864f600f5e3c2afd6ebc0b3487b50525df75006d4172b46"),
    "libreoffice-help-de": ("4:7.4.7-1+deb12u14", "00490b63c509ac96f7f212d6a6e40452d3e0d1f97ccf4b824dd5ec4c01e8277f"),
    "libreoffice-help-en-us": ("4:7.4.7-1+deb12u14", "8faa840285734d6cfe1ed25537b48f07e74bd6412e3917bf8e5f8a653f7b3712"),
    "manpages-de": ("4.18.1-1", "37d2e7ee51f22952aecec3af93647ff59194a3c74bb7a694560f49c7f7ab3978"),
    "manpages-de-dev": ("4.18.1-1", "cb3d7c10977dd3c811065d89e0d912196ec5e6f2551308edb0ba72e02da838d7"),
    "manpages": ("6.03-2", "efa1ba4cd19ad7baeae959c9209a7eb74be2ebb858bcabb412597bfc9f588c91"),
    "manpages-dev": ("6.03-2", "96f55cb5e26231d5567c89b692bced63825a14a2d5bd18fdf16ea2ed44eb9838"),
    "apt": ("2.6.2", "796fc7fe18866f5b1fb27a115d7339e549d71b7ddbc15b8d6fc4226c243e96d1"),
    "bsdextrautils": ("2.38.1-5+deb12u3", "c949c638bc238b51030bd4758ae310feab9a535c06328934e2f643b0e6e5ac82"),
    "bsdutils": ("1:2.38.1-5+deb12u3", "6cae172b006a4603e710e046c3acba8d98d36748894cbe3eeda31d415fec331e"),
    "bzip2": ("1.0.8-5+b1", "438871b3f5c5c7a357a9840951dab9dab8db7eb1ff760a563226fafa111b99e5"),
    "coreutils": ("9.1-1", "61038f857e346e8500adf53a2a0a20859f4d3a3b51570cc876b153a2d51a3091"),
    "cron": ("3.0pl1-162", "c1e12d9c993460e6396107668aa7ba79f8633decebb53aa6c38049584448be3f"),
    "debhelper": ("13.11.4", "bd764e98a9204a4b6b2d9e7b461c50fdae579314309804baff93d21e0498b64b"),
    "debianutils": ("5.7-0.5~deb12u1", "55f951359670eb3236c9e2ccd5fac9ccb3db734f5a22aff21589e7a30aee48c9"),
    "devscripts": ("2.23.4+deb12u2", "e80e4f4761f8098f4f419130caf6062f4fe68049058eb8794f3668ac565c45c3"),
    "diffutils": ("1:3.8-4", "8bdfedc14c1035e3750e9f055ac9c1ecd9b5d05d9e6dc6466c4e9237eef407dd"),
    "dpkg-dev": ("1.21.23", "43547075395dbe9290e6a5f34e9ba93aa5dcf7dfc5698c3d30cc3c85e5f7e3de"),
    "dpkg": ("1.21.23", "f89e9f8d1a4a50ade44be3ed59a6ec55460fce205d2f8520c5c492137c5b609b"),
    "e2fsprogs": ("1.47.0-2+b2", "fedd424691c08ef0739729026be298e7be8236337bf8e031b3c7ec66794e6fc2"),
    "fdisk": ("2.38.1-5+deb12u3", "a7bf5a6fee968c3bebeb37b13396ed195c59459e4631271bb3acac0d9cf42491"),
    "findutils": ("4.9.0-4", "5dd86bd0af4aa73f067dfd6b8339dd868f2dd84056aa79db29d1206d4fbc5e04"),
    "grep": ("3.8-5", "3264acea728df3c48a54f20e9291b965130e306b9d00adac76647049da7196df"),
    "gzip": ("1.12-1", "eabec1dde2834f72540d7b93fc5df2625f52611c06d93d61f5cdb12480e0e6a3"),
    "kmod": ("30+20221128-1", "e21ae247204fe8a14ac29a5f510227d45b41cd3c41059cc942f2502d25765165"),
    "less": ("590-2.1~deb12u2", "3c4ee8ce5e0f625e1169da9584e309c375a8a68e22de5821461d14446825cc1a"),
    "login": ("1:4.13+dfsg1-1+deb12u2", "f1cc45bf505a8457340dc3c36f3a01a1835aaf564d73d9d394afb8ccfb6595a0"),
    "man-db": ("2.11.2-2", "4134d16ea0233ebe78b2d1d271194fcf49a69eb2850421b0f3d76055e221fcea"),
    "mount": ("2.38.1-5+deb12u3", "456ed2c62f884bc1133b6969d4d1eb2e6d8581076b00b4c8d700151155270a7a"),
    "passwd": ("1:4.13+dfsg1-1+deb12u2", "fb787363372903e03627e53fd483e51dfb6861047a1e02c7d5a5f27d66546d08"),
    "procps": ("2:4.0.2-3", "d9d0e75779cb79af869181f17b93c5c263a2b89cac6a0193c436160a4483ddc1"),
    "psmisc": ("23.6-1", "9d02f654bdf280a6622a9b1371f7a1fa44546702d11991e438558bc259df7b69"),
    "sed": ("4.9-1+deb12u1", "fd557efeee8aae4619c2cb7f68aadccb804322ad4a99ab048aaae5901d253885"),
    "systemd": ("252.39-1~deb12u2", "286f879c537bfba92e59d580c075ad20ab49020244c79634656850a306dd462b"),
    "tar": ("1.34+dfsg-1.2+deb12u1", "24fb92e98c2969171f81a8b589263d705f6b1670f95d121cd74c810d4605acc3"),
    "util-linux": ("2.38.1-5+deb12u3", "8eb241ff24b2e1ee9c0373f4fc9bc728b85bf5966c1496154df7da01c0e42f34"),
    "xz-utils": ("5.4.1-1+deb12u2", "f99fc3fe4b4e5baecf5fd8b53853a82e1e71cb5ec187b36b0ddcf227a8961c8f"),
    "debian-reference-de": ("2.100", "3b0ce65fd63e75ddf8eb07ca36293425135080e690a07e06a6ac8bc8040ef0aa"),
    "debian-reference-en": ("2.100", "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f"),
    "maint-guide": ("1.2.53", "762c8a400a36668d2eb814a3ba356b06488fd889dfce478eb11d5cfb189a47b5"),
    "maint-guide-de": ("1.2.53", "821afc6b85ffe9cbc9b7acbcdd5876ccbb855c3876ee5524d21602fd41d979c1"),
    "developers-reference": ("12.18", "0dba82f6fa16e373f2a84ad07e7971aa9264ad2e7d2ae46b37edbc9c5fd57e2e"),
    "developers-reference-de": ("12.18", "281f0c2b24139e0ac83117c3e95b60458a6644fe14c82cf9ea78e87ea8c175d7"),
    "gnome-user-docs": ("43.0-2", "0d635a840747958ca84da778b40d341f1155603851f922c9a171f5a181d6a39f"),
    "evince-common": ("43.1-2+deb12u1", "777ea7d094db2acd7b385e272b0ba6cf03c7e45d574e6f2c689b507de3d95dbb"),
    "seahorse": ("43.0-1", "9568f42e1587c556f90143fdc252b6dc99276684a4da140b07607efb583968d4"),
    "gnome-terminal-data": ("3.46.8-1", "7702598bf2f81b6ec713d14867e367d9f5f2f91580c233db0dadc4c31c2f227d"),
    "eog": ("43.2-1+deb12u1", "986338ef28f9dc57141f11c27df27b453f95bbe460d44f4a9ec6c7d815e9ccc2"),
    "gnome-calculator": ("1:43.0.1-2", "395526cc25086a0ad15cdcd6daf403e5eb542cfe494de743e2e9394c39a0f065"),
    "file-roller": ("43.0-1", "2bb8ba003a234b82228154ca5555c55e464b010d1d866605658d1cd510e52de2"),
    "epiphany-browser-data": ("43.1-1", "6577aed576ec670fa33ee70a4001d1200cf1cf80745bc58267aa273488cc24fd"),
    "gnome-system-monitor": ("42.0-2", "fb6f0c54b9af1a17e1d047dccbe4a8df6b54fe2cde4cb6a214d78dabbee3ea68"),
    "totem-common": ("43.0-2", "23190cc8726d7b8bfe9a4362260cdb2c98d304b195104ffc7ea382593c991ad8"),
    "cheese-common": ("43.0-1", "851b3595fcb7b5dbba1c646bfddd64a56907302e0b85db4c38dda1aa2336bfbb"),
    "simple-scan": ("42.5-2", "782842b780d6069fbc422122e40cd38de19c3577a8129e431744028b812ff2ef"),
    "gnome-clocks": ("43.0-1", "cd92c912a6f69789785b9e898611a6f8ced7659597e000e8f7a92583cf259a46"),
    "baobab": ("43.0-1", "acab793673e0f559080b492a40281c5ea7da04da5830c28c346cca62860fad69"),
    "wesnoth-1.16-did": ("1:1.16.9-1", "774619f5aaeb7eb4c848e1cc1758795a8c58e96bd270cceecc9d847dbcc769b3"),
    "wesnoth-1.16-dm": ("1:1.16.9-1", "1997ad4d91e8de36415db2a3445904288f588a76d75111222d2aace409ace5c6"),
    "wesnoth-1.16-dw": ("1:1.16.9-1", "47982e08b2a5d5fd79f400a5453f32c6d7dd56f2ccc10412a9e47dec8a9b3ca4"),
    "wesnoth-1.16-ei": ("1:1.16.9-1", "687abe111ee662b7324336ddadc209758f68d2eeb1ccbf630238f27a0e3c6404"),
    "wesnoth-1.16-httt": ("1:1.16.9-1", "05b16a3f8f8204278794aae14d8e6a7c95d2b2faef7337c4997c827a146d1bbd"),
    "wesnoth-1.16-l": ("1:1.16.9-1", "5383c79046df6121929bc36a8ec3f970ab4cf9c1239ed9b31868201c27f4266d"),
    "wesnoth-1.16-low": ("1:1.16.9-1", "2f304551b97b7fb76a2adb5ad8ffcac3e78476bc8ade17532c90714065c9bf9f"),
    "wesnoth-1.16-nr": ("1:1.16.9-1", "13edcf1bdd23708f531ba81c67100c5800363a119f10155c7f9e146fe7dced34"),
    "wesnoth-1.16-sof": ("1:1.16.9-1", "b6f1ddffdbd1a977f3965dae944e4fb11c147627471f1cfc71c92d1e69efb555"),
    "wesnoth-1.16-sota": ("1:1.16.9-1", "fa44304ff53d259f3c5fe13c03cb8166e55e9c307807d1a5663048c396645ba6"),
    "wesnoth-1.16-sotbe": ("1:1.16.9-1", "877a2f4a7fd8df54fd3b4561ffbd5fa95d0390d7c7372f3cb66367c8007918cb"),
    "wesnoth-1.16-thot": ("1:1.16.9-1", "79d9ec6e43300ea9f41295ccf3fb451e8eeaefc17007123f65d77eb05cb88695"),
    "wesnoth-1.16-trow": ("1:1.16.9-1", "b5009e964ac7157a46d50de911e4f56f5bb4389d60b82a513b5f382671d180d7"),
    "wesnoth-1.16-tsg": ("1:1.16.9-1", "38b5f564253b8e0d9c093b2b7c58aabfef24f688968d9cbaf42abfc1e76d8288"),
    "wesnoth-1.16-ttb": ("1:1.16.9-1", "d0d45693665305191488553ade8dc1d0aa26ab17d4bffae3bf6969db4a766329"),
    "wesnoth-1.16-utbs": ("1:1.16.9-1", "81e05717bebbfb6348c0bed2cd6ce2560c4fd9205ed419c2e7bc039b4a70e228"),
}

# sha256 of the apt translation indexes the descriptions are read from (bookworm main/i18n, uncompressed).
KNOWN_INDEXES = {"de": "adac331fc51f9a00c1b4120b4ac87423be2b1f1615d4f288c7cbc2d5258c0650",
                 "en": "62f59c3cdca9786e4f7adf9002f9f5729a684adcb4667e58e448dec9b5a46c7f"}

Pair = tuple[str, str]  # (german, english)


# ----------------------------------------------------------------------------------------------------------------
# 1. The Ding dictionary
# ----------------------------------------------------------------------------------------------------------------
# Ding annotations: {n} {vt} (grammar), [ugs.] [Br.] (register, region, field). They are never part of the text.
_DING_ANNOTATION = re.compile(r"\s*(\{[^{}]*\}|\[[^\[\]]*\])")


def _is_sentence(text: str) -> bool:
    """A full sentence: ends in . ! or ?, has at least 3 words, and is not a list of ``;`` alternatives."""
    return text[-1:] in (".", "!", "?") and len(text.split()) >= 3 and ";" not in text


def ding_entries(lines: Iterable[str]) -> list[list[Pair]]:
    """The entries of the Ding ``de-en`` file, each the list of its aligned ``(german, english)`` parts, raw.

    An entry ``de_1 | de_2 | … :: en_1 | en_2 | …`` gives ``[(de_1, en_1), (de_2, en_2), …]`` with its
    annotations still in; ``#`` comments, malformed lines and entries whose sides have different numbers of
    parts (no way to tell which part translates which) are left out.
    """
    entries = []
    for line in lines:
        line = line.rstrip("\n")
        if not line or line.startswith("#") or line.count(" :: ") != 1:
            continue
        de_side, en_side = line.split(" :: ")
        de_parts, en_parts = de_side.split(" | "), en_side.split(" | ")
        if len(de_parts) == len(en_parts):
            entries.append(list(zip(de_parts, en_parts)))
    return entries


def ding_part(text: str) -> str:
    """One part of a Ding entry without its ``{}``/``[]`` annotations, normalised."""
    return normalize_text(_DING_ANNOTATION.sub("", text))


def ding_pairs(lines: Iterable[str]) -> list[Pair]:
    """Sentence pairs from the lines of the Ding ``de-en`` file (:func:`ding_entries`).

    Annotations in ``{}`` and ``[]`` are dropped; a part is kept when both sides are full sentences
    (:func:`_is_sentence`). Returns ``(german, english)`` pairs in file order, duplicates removed.
    """
    seen: set[Pair] = set()
    out: list[Pair] = []
    for entry in ding_entries(lines):
        for de, en in entry:
            de, en = ding_part(de), ding_part(en)
            if _is_sentence(de) and _is_sentence(en) and (de, en) not in seen:
                seen.add((de, en))
                out.append((de, en))
    return out


# ----------------------------------------------------------------------------------------------------------------
# 2. gettext catalogs
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CatalogEntry:
    """One singular message of a ``.mo`` file: optional context, the original and its translation."""

    context: str | None
    msgid: str
    msgstr: str


def read_mo(data: bytes | str | Path) -> list[CatalogEntry]:
    """Parse a compiled gettext catalog (``.mo``) and return its singular messages.

    The format (GNU gettext manual, "The Format of GNU MO Files") is small: a header of 32-bit integers
    ``magic, revision, N, offset_of_originals, offset_of_translations, …``, then two tables of ``N``
    ``(length, offset)`` pairs pointing at the NUL-terminated strings. The byte order is given by the magic
    number. A context is stored as ``context + "\\x04" + msgid``; plural entries hold ``singular\\0plural``
    and are skipped (their placeholders make them useless as sentence pairs anyway), as is the header entry
    (empty msgid). Strings are decoded in the charset the header names (``charset=UTF-8`` in every catalog the
    recipe reads; UTF-8 when the header names none); bytes that are not valid in it raise ``ValueError``.
    """
    if not isinstance(data, bytes):
        try:
            return read_mo(Path(data).read_bytes())
        except ValueError as err:  # name the file
            raise ValueError(f"{data}: {err}") from None
    if len(data) < 20:
        raise ValueError(f"a .mo file has a header of at least 20 bytes, got {len(data)} bytes")
    for endian in ("<", ">"):
        if struct.unpack(endian + "I", data[:4])[0] == 0x950412DE:
            break
    else:
        raise ValueError(f"not a .mo file: magic number 0x950412de expected, got 0x{data[:4].hex()}")
    revision, n, orig_off, trans_off = struct.unpack(endian + "4I", data[4:20])
    if revision >> 16 not in (0, 1):
        raise ValueError(f"unsupported .mo major revision {revision >> 16} (expected 0 or 1)")

    def string(table: int, i: int) -> bytes:
        if table + 8 * i + 8 > len(data):
            raise ValueError(f".mo table entry {i} at byte {table + 8 * i} runs past the end of the file "
                             f"({len(data)} bytes): truncated or not a .mo file")
        length, offset = struct.unpack(endian + "2I", data[table + 8 * i: table + 8 * i + 8])
        if offset + length > len(data):
            raise ValueError(f".mo string {i} runs past the end of the file ({offset + length} > {len(data)})")
        return data[offset: offset + length]

    charset = "utf-8"
    for i in range(n):  # the header (empty msgid) names the catalog's charset, as gettext reads it
        if not string(orig_off, i):
            found = re.search(rb"charset=([-\w.:]+)", string(trans_off, i), re.IGNORECASE)
            charset = found.group(1).decode("ascii") if found else charset
            break
    try:
        codecs.lookup(charset)
    except LookupError:
        raise ValueError(f".mo header names the charset {charset!r}, which Python does not know") from None

    def text(raw: bytes, i: int) -> str:
        try:
            return raw.decode(charset)
        except UnicodeDecodeError as err:
            raise ValueError(f".mo message {i} is not valid {charset} (the header's charset): byte "
                             f"0x{raw[err.start]:02x} at offset {err.start}") from None

    entries = []
    for i in range(n):
        key, value = string(orig_off, i), string(trans_off, i)
        if not key or b"\x00" in key:  # header, or a plural entry
            continue
        context, _, msgid = key.rpartition(b"\x04")
        entries.append(CatalogEntry(text(context, i) if context else None, text(msgid, i), text(value, i)))
    return entries


# Things that make a catalog message unusable as a sentence pair. Each pattern is checked on both sides.
_REJECT = (
    # printf-style placeholders: %s, %d, %1$s, %qs (GCC), %(name)s, %L ...; a lone "%" before a space is a percent sign
    ("placeholder", re.compile(r"%[^\s]")),
    ("placeholder", re.compile(r"\{[^{}]*\}")),  # {0}, {name}
    ("placeholder", re.compile(r"\$\(?\w|\$\w+\$")),  # $1, $(ARG1), $name$ (LibreOffice)
    ("markup", re.compile(r"<[A-Za-z/!?][^<>]*>|&[A-Za-z]+;|&#\d+;")),  # <b>, </a>, &amp;
    ("url", re.compile(r"[A-Za-z]+://|www\.|\S@\S+\.\w")),  # URLs and e-mail addresses
    ("tab", re.compile(r"\t")),  # option tables such as "-march=ARCH\tGenerate code for ..."
)

# Menu accelerator ("mnemonic") marks: GTK "_File", LibreOffice "~File", Qt "&File". A single mark before a
# letter or digit is removed; a second one (or an underscore left over, as in "const_double_split") means the
# string is an identifier or code, and the pair is dropped.
_MNEMONIC = re.compile(r"[_~&](?=\w)")


def _strip_mnemonic(text: str) -> str | None:
    marks = _MNEMONIC.findall(text)
    if len(marks) > 1:
        return None
    text = _MNEMONIC.sub("", text, count=1)
    if "_" in text or "~" in text or _MNEMONIC.search(text):
        return None
    return text


_LETTER = re.compile(r"[^\W\d_]")
_CODE_NAME = re.compile(r"[A-Z0-9.]+")  # spreadsheet function names such as CHIQUINV / CHISQINV


def clean_catalog_pair(english: str, german: str, max_chars: int | None = MAX_CHARS) -> tuple[Pair | None, str]:
    """Clean one catalog message pair; return ``((german, english), "ok")`` or ``(None, reason)``.

    Rejected: printf/brace/dollar placeholders, markup and entities, URLs and e-mail addresses, tab-separated
    tables, more than one accelerator mark or a leftover ``_``/``~`` (identifiers), empty sides, no letter at
    all, identical sides (untranslated, or names), upper-case code names on both sides (spreadsheet
    functions: ``DBSTDABW``/``DSTDEV``), an English side copied into the German one (GCC's
    "Interner Fehler: <english>"), a side longer than ``max_chars`` characters (None: no limit). Kept pairs have
    their accelerator mark removed and whitespace normalised (wrapped lines joined).
    """
    for reason, pattern in _REJECT:
        if pattern.search(english) or pattern.search(german):
            return None, reason
    en, de = _strip_mnemonic(english), _strip_mnemonic(german)
    if en is None or de is None:
        return None, "accelerator"
    en, de = normalize_text(en), normalize_text(de)
    if not en or not de:
        return None, "empty"
    if not _LETTER.search(en) or not _LETTER.search(de):
        return None, "no letters"
    if en == de:
        return None, "identical"
    if _CODE_NAME.fullmatch(en) and _CODE_NAME.fullmatch(de):
        return None, "code name"
    if len(en.split()) >= 3 and en in de:
        return None, "untranslated"
    if max_chars is not None and (len(en) > max_chars or len(de) > max_chars):
        return None, "too long"
    return (de, en), "ok"


def catalog_pairs(mo_files: Iterable[str | Path]) -> tuple[list[Pair], collections.Counter]:
    """Clean pairs from ``.mo`` catalogs whose msgids are English and msgstrs German.

    Returns the ``(german, english)`` pairs (in file order, duplicates removed) and a counter of why the other
    messages were dropped (``"duplicate"`` included).
    """
    reasons: collections.Counter = collections.Counter()
    seen: set[Pair] = set()
    out: list[Pair] = []
    for path in mo_files:
        for entry in read_mo(path):
            pair, reason = clean_catalog_pair(entry.msgid, entry.msgstr)
            if pair is not None and pair in seen:
                reason = "duplicate"
            reasons[reason] += 1
            if reason == "ok":
                seen.add(pair)
                out.append(pair)
    return out, reasons


# Wesnoth marks a message's context inside the msgid: "female^Princess", "teamname^Enemies".
_CONTEXT_PREFIX = re.compile(r"^[^\s^]+\^")


def story_pairs(mo_files: Iterable[str | Path]) -> tuple[list[Pair], collections.Counter]:
    """Sentence pairs from ``.mo`` catalogs of prose (the Wesnoth campaigns' dialogue and narration).

    Each message is cleaned as :func:`clean_catalog_pair` cleans UI messages (placeholders, markup, accelerators
    …; a context prefix ``word^`` is removed first), but with no length limit: a narration paragraph is then
    split into sentences, which pair up when both sides have as many (:func:`~attnkit.data.corpora.pair_filters.admit_blocks`:
    length ratio and language checked, duplicates dropped). Returns the ``(german, english)`` pairs in file
    order and a counter of why the other messages or sentences were dropped.
    """
    reasons: collections.Counter = collections.Counter()
    blocks: list[Pair] = []
    for path in mo_files:
        for entry in read_mo(path):
            pair, reason = clean_catalog_pair(_CONTEXT_PREFIX.sub("", entry.msgid, count=1), entry.msgstr,
                                              max_chars=None)
            if pair is None:
                reasons[reason] += 1
            else:
                blocks.append(pair)
    return admit_blocks(blocks, set(), reasons), reasons


# ----------------------------------------------------------------------------------------------------------------
# 3. The split
# ----------------------------------------------------------------------------------------------------------------
def split_pairs(eval_pool: list[Pair], extra: list[Pair], *, n_test: int = N_TEST, n_valid: int = N_VALID,
                seed: int = SPLIT_SEED) -> tuple[dict[str, list[Pair]], int]:
    """Split into ``{"train", "valid", "test"}``; valid and test are drawn from ``eval_pool`` only.

    ``eval_pool`` is shuffled with ``random.Random(seed)``; pairs are taken in that order for test, then valid,
    skipping any whose German or English string (casefolded) was already taken, so all evaluation strings are
    distinct. Train is every other pair of ``eval_pool + extra`` (deduplicated, shuffled with the same seed)
    minus those sharing a German string with the evaluation Germans or an English string with the evaluation
    Englishes. Returns the splits and the number of train pairs removed that way.
    """
    if n_test < 0 or n_valid < 0:
        raise ValueError(f"n_test and n_valid must be >= 0, got {n_test} and {n_valid}")
    rng = random.Random(seed)
    order = list(range(len(eval_pool)))
    rng.shuffle(order)
    taken_de: set[str] = set()
    taken_en: set[str] = set()
    test: list[Pair] = []
    valid: list[Pair] = []
    for i in order:
        if len(test) == n_test and len(valid) == n_valid:
            break
        de, en = eval_pool[i]
        if de.casefold() in taken_de or en.casefold() in taken_en:
            continue
        (test if len(test) < n_test else valid).append((de, en))
        taken_de.add(de.casefold())
        taken_en.add(en.casefold())
    if len(test) < n_test or len(valid) < n_valid:
        raise ValueError(f"the evaluation pool is too small: need {n_test} test + {n_valid} valid pairs with "
                         f"distinct strings, got {len(test)} + {len(valid)} from {len(eval_pool)} pairs")
    train: list[Pair] = []
    seen: set[Pair] = set(test) | set(valid)  # the evaluation pairs themselves never go to train
    removed = 0
    for pair in eval_pool + extra:
        if pair in seen:
            continue
        seen.add(pair)
        if pair[0].casefold() in taken_de or pair[1].casefold() in taken_en:
            removed += 1  # would leak an evaluation sentence into training
            continue
        train.append(pair)
    rng.shuffle(train)
    return {"train": train, "valid": valid, "test": test}, removed


def hold_out_documents(documents: dict[str, list[Pair]], n: int, *, seed: int = SPLIT_SEED,
                       min_words: int = 5) -> tuple[list[Pair], set[str]]:
    """Pick whole documents, in a seeded order, until ``n`` full-sentence pairs are collected.

    ``documents`` maps a document name (a source package) to its pairs. The names are sorted and shuffled
    with ``random.Random(seed)``; each document in turn contributes its pairs whose both sides are full
    sentences (:func:`attnkit.data.corpora.pair_filters.is_full_sentence` with ``min_words``) and whose strings
    (casefolded) were not taken yet, until ``n`` are taken. Returns ``(pairs, names of the held-out
    documents)``: every pair of those documents must stay out of train, even those not taken.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    names = sorted(documents)
    random.Random(seed).shuffle(names)
    taken: list[Pair] = []
    taken_de: set[str] = set()
    taken_en: set[str] = set()
    held: set[str] = set()
    for name in names:
        if len(taken) == n:
            break
        held.add(name)
        for de, en in documents[name]:
            if len(taken) == n:
                break
            if (is_full_sentence(de, min_words) and is_full_sentence(en, min_words)
                    and de.casefold() not in taken_de and en.casefold() not in taken_en):
                taken.append((de, en))
                taken_de.add(de.casefold())
                taken_en.add(en.casefold())
    if len(taken) < n:
        raise ValueError(f"the documents hold only {len(taken)} full-sentence pairs, need {n}")
    return taken, held


def remove_overlap(train: list[Pair], held_out: Iterable[Pair]) -> tuple[list[Pair], int]:
    """``train`` without the pairs that share a German or an English string (casefolded) with ``held_out``;
    returns the kept pairs (in order) and how many were removed."""
    held_de, held_en = set(), set()
    for de, en in held_out:
        held_de.add(de.casefold())
        held_en.add(en.casefold())
    kept = [p for p in train if p[0].casefold() not in held_de and p[1].casefold() not in held_en]
    return kept, len(train) - len(kept)


# ----------------------------------------------------------------------------------------------------------------
# 4. The recipe
# ----------------------------------------------------------------------------------------------------------------
_OUTPUTS = tuple(f"{name}.tsv" for name in SPLITS) + (IN_DOMAIN_FILE,)


def _lines(paths: Iterable[Path]) -> Iterable[str]:
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            yield from fh


def _descriptions(root: Path) -> tuple[dict[str, list[Pair]], collections.Counter, list[dict]]:
    """The package-description documents, their filter counts, and a record of the apt indexes read.

    Of the translation indexes apt fetched, exactly the two pinned in :data:`KNOWN_INDEXES` are read (the
    release's ``main`` Translation-de and Translation-en); if the mirror now serves others, this fails naming
    the index and both checksums. The ``Packages`` indexes only map binary to source packages (the documents).
    """
    indexes = debian_descriptions.fetch_translation_indexes(root / "apt")
    stale = [p for kind in ("de", "en") for p in indexes[kind] if sha256_file(p) != KNOWN_INDEXES[kind]]
    if stale and not all(any(sha256_file(p) == KNOWN_INDEXES[k] for p in indexes[k]) for k in ("de", "en")):
        for p in stale:  # a cached index that is damaged (or from another release): ask the mirror again, once
            p.unlink()
        indexes = debian_descriptions.fetch_translation_indexes(root / "apt")
    chosen: dict[str, Path] = {}
    for kind in ("de", "en"):
        digests = {p: sha256_file(p) for p in indexes[kind]}
        match = [p for p, digest in digests.items() if digest == KNOWN_INDEXES[kind]]
        if not match:
            found = ", ".join(f"{p.name} {d}" for p, d in digests.items()) or "none"
            raise FetchError(f"Debian's Translation-{kind} index changed: this recipe is pinned to sha256 "
                             f"{KNOWN_INDEXES[kind]} (bookworm main), the mirror gave {found}; a new point release "
                             "changed the package descriptions: update KNOWN_INDEXES in attnkit/data/corpora/de_en.py")
        chosen[kind] = match[0]
    sources = debian_descriptions.source_packages(_lines(indexes["packages"]))
    docs, reasons = debian_descriptions.description_documents(_lines([chosen["de"]]), _lines([chosen["en"]]), sources)
    record = [{"index": p.name, "bytes": p.stat().st_size, "sha256": sha256_file(p)}
              for kind in ("de", "en", "packages") for p in ([chosen[kind]] if kind in chosen else indexes[kind])]
    return docs, reasons, record


def _cached(root: Path) -> bool:
    """True if every output exists and matches the checksums in SOURCE.json written by this recipe version."""
    return verified_record(root, _OUTPUTS, recipe_version=RECIPE_VERSION) is not None


@dataclass
class _Unpacked:
    """The fetched packages' record (SOURCE.json's ``packages``) and their files sorted by kind."""

    packages: list[dict] = field(default_factory=list)
    ding: list[Pair] = field(default_factory=list)
    mo_files: list[Path] = field(default_factory=list)
    story_files: list[Path] = field(default_factory=list)
    help_roots: dict[str, Path] = field(default_factory=dict)
    man_roots: dict[str, list[Path]] = field(default_factory=lambda: {"man-de": [], "man-en": []})
    gnome_roots: list[Path] = field(default_factory=list)
    manual_files: dict[str, dict[tuple[str, str], Path]] = field(
        default_factory=lambda: {"manual-de": {}, "manual-en": {}})


def _fetch_packages(debs_dir: Path, tmp: Path) -> _Unpacked:
    """Download the pinned packages into ``debs_dir``, unpack each into ``tmp`` and sort their files by kind."""
    from tqdm import tqdm

    u = _Unpacked()
    for src in tqdm(PACKAGES, desc="de-en: fetching Debian packages", unit="pkg"):
        pinned_version, pinned_sha256 = KNOWN_DEBS[src.package]
        deb, version = apt_download(src.package, debs_dir, version=pinned_version, sha256=pinned_sha256)
        unpacked = dpkg_extract(deb, tmp / src.package)
        files = sorted(f for g in src.globs for f in unpacked.glob(g) if f.is_file())
        if not files:
            raise RuntimeError(f"{src.package} {version} contains none of {list(src.globs)}; "
                               "the package layout changed, update attnkit/data/corpora/de_en.py")
        u.packages.append({"package": src.package, "version": version, "license": src.license,
                           "deb": deb.name, "deb_bytes": deb.stat().st_size, "sha256": sha256_file(deb),
                           "paths": list(src.globs), "n_files": len(files)})
        if src.kind == "ding":
            for f in files:
                with open(f, encoding="utf-8") as fh:
                    u.ding.extend(ding_pairs(fh))
        elif src.kind in u.man_roots:
            u.man_roots[src.kind].append(unpacked / man_pages.MAN_ROOT / ("de" if src.kind == "man-de" else ""))
        elif src.kind == "gnome":
            u.gnome_roots.append(unpacked / gnome_help.HELP_ROOT)
        elif src.kind in ("manual-de", "manual-en"):
            for f in files:
                key = _manual_page(src.package, f)
                if key is not None:
                    u.manual_files[src.kind][key] = f
        elif src.kind == "man-owner":  # English pages, and German ones when the package has its own
            u.man_roots["man-en"].append(unpacked / man_pages.MAN_ROOT)
            if (unpacked / man_pages.MAN_ROOT / "de").is_dir():
                u.man_roots["man-de"].append(unpacked / man_pages.MAN_ROOT / "de")
        elif src.kind == "story":
            u.story_files.extend(files)
        elif src.kind in ("help-de", "help-en"):
            u.help_roots[src.kind] = unpacked / libreoffice_help.HELP_ROOT / ("de" if src.kind == "help-de" else "en-US")
        else:
            u.mo_files.extend(files)
    return u


def _align_documents(u: _Unpacked, stages) -> dict[str, tuple[dict[str, list[Pair]], collections.Counter]]:
    """The document-aligned sources, each ``(pairs per document, drop reasons)``: ``help`` (LibreOffice),
    ``man``, ``gnome_help``, ``manual`` (Debian's manuals). ``stages`` (a tqdm bar) moves one per source."""
    aligned = {}
    aligned["help"] = ({}, collections.Counter())
    if u.help_roots:
        aligned["help"] = libreoffice_help.help_documents(u.help_roots["help-de"], u.help_roots["help-en"])
    stages.update()
    aligned["man"] = man_pages.man_documents(u.man_roots["man-de"], u.man_roots["man-en"])
    stages.update()
    aligned["gnome_help"] = gnome_help.gnome_documents(u.gnome_roots)
    stages.update()
    both = sorted(u.manual_files["manual-de"].keys() & u.manual_files["manual-en"].keys())
    aligned["manual"] = html_manuals.manual_documents(
        ("/".join(key), u.manual_files["manual-de"][key], u.manual_files["manual-en"][key]) for key in both)
    stages.update()
    return aligned


def _dropped(reasons: collections.Counter) -> dict[str, int]:
    return dict(sorted((k, v) for k, v in reasons.items() if k != "ok"))


def _write_splits(root: Path, splits: dict[str, list[Pair]], in_domain: list[Pair]) -> dict[str, dict]:
    """Write ``<split>.tsv`` for every split and ``in-domain.tsv``; SOURCE.json's ``outputs`` (pairs, bytes, sha256
    per file)."""
    outputs = {}
    for name, pairs in [*((name, splits[name]) for name in SPLITS), ("in-domain", in_domain)]:
        path = root / f"{name}.tsv"
        write_tsv(path, pairs)
        outputs[path.name] = {"pairs": len(pairs), "bytes": path.stat().st_size, "sha256": sha256_file(path)}
    return outputs


def _source_record(packages: list[dict], indexes: list[dict], counts: dict, outputs: dict) -> dict:
    """SOURCE.json of the recipe: what was fetched, how it was split, the counts and the written files."""
    return {
        "recipe": "de-en",
        "recipe_version": RECIPE_VERSION,
        "description": "German→English sentence pairs: Ding dictionary example sentences (trans-de-en), "
                       "gettext catalogs of LibreOffice, GCC, git, GIMP and Evolution, the Wesnoth campaigns' "
                       "dialogue and narration, LibreOffice help, man pages, GNOME help, Debian's manuals and "
                       "package descriptions (DDTP); valid/test from Ding, test-docs from descriptions.",
        "format": "TSV, one pair a line: german<TAB>english (UTF-8, NFC, whitespace normalised)",
        "license": "per package, see packages[].license (the dictionary is GPL-2+)",
        "packages": packages,
        "apt_indexes": indexes,
        "split": {"seed": SPLIT_SEED, "n_test": N_TEST, "n_valid": N_VALID, "n_test_docs": N_TEST_DOCS,
                  "ding_weight": DING_WEIGHT,
                  "rule": "valid/test from dictionary sentences only; test-docs: full sentences (>= 5 words, "
                          ".!?) of package descriptions held out by whole source package; no train pair shares "
                          "a German or an English string (casefolded) with valid/test/test-docs; dictionary "
                          f"sentences repeated {DING_WEIGHT} times in train; in-domain.tsv: the train pairs of the "
                          "dictionary and the Wesnoth campaigns, once each"},
        "counts": counts,
        "outputs": outputs,
    }


@register("de-en", kind="mt",
          description="German→English from Debian: ~18k dictionary sentences (Ding), ~36k UI messages, ~16k game "
                      "dialogue (Wesnoth), ~43k LibreOffice help, ~43k man-page, ~15k GNOME help and Debian manual, "
                      "~45k package-description sentences")
def prepare_de_en(root: Path, force: bool = False) -> Path:
    """Fetch the packages, extract and clean the pairs, split, write the TSVs and SOURCE.json into ``root``.

    Prints what it does and the counts. Returns ``root``. Idempotent: with the outputs present and matching
    SOURCE.json nothing is fetched; ``force=True`` rebuilds everything from the packages and indexes, reusing
    the cached ones that match their pinned sha256 (a damaged one is fetched again; the pinned ``.deb`` files a
    user put into ``debs/`` for an offline build are never deleted).
    """
    from tqdm import tqdm

    root = Path(root)
    if not force and _cached(root):
        return root
    start = time.perf_counter()
    debs_dir = root / "debs"
    with tempfile.TemporaryDirectory(dir=root, prefix=".extract-") as tmp:
        u = _fetch_packages(debs_dir, Path(tmp))
        ding = u.ding
        stages = tqdm(total=7, desc="de-en: aligning", unit="source")
        catalog, reasons = catalog_pairs(u.mo_files)
        stages.update()
        stories, story_reasons = story_pairs(u.story_files)
        stages.update()
        aligned = _align_documents(u, stages)
    stages.set_description("de-en: aligning (package descriptions)")
    docs, desc_reasons, indexes = _descriptions(root)
    stages.update()
    stages.close()
    help_pairs, man_pairs, gnome_pairs, manual_pairs = (
        [p for name in sorted(aligned[key][0]) for p in aligned[key][0][name]]
        for key in ("help", "man", "gnome_help", "manual"))
    test_docs, held_docs = hold_out_documents(docs, N_TEST_DOCS, seed=SPLIT_SEED)
    descriptions = [p for name in sorted(docs) if name not in held_docs for p in docs[name]]
    extra = catalog + stories + help_pairs + man_pairs + gnome_pairs + manual_pairs + descriptions
    splits, removed = split_pairs(ding, extra, n_test=N_TEST, n_valid=N_VALID, seed=SPLIT_SEED)
    splits["train"], removed_docs = remove_overlap(splits["train"], test_docs)
    splits["test-docs"] = test_docs
    ding_set = set(ding)
    ding_train = [p for p in splits["train"] if p in ding_set]
    splits["train"] += ding_train * (DING_WEIGHT - 1)
    random.Random(SPLIT_SEED).shuffle(splits["train"])
    # each unique train pair counted once, for the first source (in this order) that has it
    per_source = collections.Counter()
    sources = (("catalogs", set(catalog)), ("stories", set(stories)), ("libreoffice_help", set(help_pairs)),
               ("man_pages", set(man_pairs)), ("gnome_help", set(gnome_pairs)), ("manuals", set(manual_pairs)),
               ("descriptions", set(descriptions)))
    for pair in set(splits["train"]) - ding_set:
        per_source[next((name for name, pairs in sources if pair in pairs), "other")] += 1
    per_source = {"dictionary": len(ding_train), **{name: per_source[name] for name, _ in sources}}

    # the register of the Ding test, once each, in train's order: what `train mt --anneal-data de-en` ends on
    in_domain_set = ding_set | set(stories)
    in_domain = list(dict.fromkeys(p for p in splits["train"] if p in in_domain_set))
    outputs = _write_splits(root, splits, in_domain)
    counts = {
        "dictionary_sentences": len(ding),
        "catalog_pairs": len(catalog),
        "catalog_dropped": _dropped(reasons),
        "story_pairs": len(stories),
        "story_dropped": _dropped(story_reasons),
        **{f"{key}_{what}": value
           for key, n_pairs in (("help", len(help_pairs)), ("man", len(man_pairs)), ("gnome_help", len(gnome_pairs)),
                                ("manual", len(manual_pairs)))
           for what, value in (("pairs", n_pairs), ("pages", len(aligned[key][0])), ("dropped", _dropped(aligned[key][1])))},
        "description_pairs": sum(len(v) for v in docs.values()),
        "description_documents": len(docs),
        "description_dropped": _dropped(desc_reasons),
        "test_docs_documents": len(held_docs),
        "train_unique_per_source": per_source,
        "train_removed_overlap": removed + removed_docs,
        **{name: len(splits[name]) for name in SPLITS},
        "in-domain": len(in_domain),
    }
    write_source_record(root, _source_record(u.packages, indexes, counts, outputs))
    print(f"de-en: {len(ding):,} dictionary sentences + {len(catalog):,} catalog pairs + "
          f"{len(stories):,} story pairs + "
          f"{len(help_pairs):,} LibreOffice help pairs + {len(man_pairs):,} man-page pairs + "
          f"{len(gnome_pairs):,} GNOME help pairs + {len(manual_pairs):,} Debian manual pairs + "
          f"{counts['description_pairs']:,} description pairs ({len(docs):,} source packages) → "
          f"train {len(splits['train']):,} (dictionary ×{DING_WEIGHT}) / valid {len(splits['valid']):,} / "
          f"test {len(splits['test']):,} / test-docs {len(splits['test-docs']):,} / in-domain {len(in_domain):,} "
          f"({removed + removed_docs:,} train pairs removed for overlapping the evaluation sets) "
          f"in {time.perf_counter() - start:.1f}s")
    print("de-en: unique train pairs per source: "
          + ", ".join(f"{k} {v:,}" for k, v in per_source.items()))
    return root
