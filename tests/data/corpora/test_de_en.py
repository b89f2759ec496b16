"""The de-en recipe (attnkit.data.corpora.de_en): Ding parsing, .mo parsing, catalog cleaning, the split, the recipe.

Everything here is offline except ``test_real_recipe_end_to_end`` (marked ``network``), which runs the real
recipe into the test cache ``$ATTNKIT_TEST_HOME/data/de-en`` (default ``~/.cache/attnkit-tests``, fixture
``attnkit_test_home`` in conftest.py; the user's ``$ATTNKIT_HOME`` is never touched): the first run downloads
~39 MB of Debian packages with apt-get and takes 20-40 s, later runs only re-check the cached files (~1 s).
"""

from __future__ import annotations

import collections
import gettext
import io
import json
import re
import struct

import pytest

from attnkit.data.corpora import de_en
from attnkit.data.corpora.de_en import catalog_pairs, clean_catalog_pair, ding_pairs, read_mo, split_pairs, story_pairs
from attnkit.data.fetch import FetchError, sha256_file
from attnkit.data.corpora.parallel import read_tsv


# --- Ding dictionary lines -----------------------------------------------------------------------------------
DING = """\
# Version :: devel 2023-01-30
Aal {m} [cook.] | Aale {pl} :: eel | eels
scheinbar {adv} | Das ist nur scheinbar paradox. :: seemingly | This is only seemingly a paradox.
Lass das! [ugs.] | Er ließ sich leicht überreden. :: Leave it! [coll.] | He was easily persuaded.
Weg {m} | Wege {pl} | Das ist der Weg. :: way | ways
Wir gehen; ihr bleibt. :: We go; you stay.
Ja, das stimmt. | Was es nicht alles gibt! :: Yes, that is right | It’s amazing what’s out there!
Er lobte ihre Kochkunst {f}. :: He praised her cooking {n}.
Er lobte ihre Kochkunst. :: He praised her cooking.
kein trenner hier
"""


def test_ding_pairs_keeps_aligned_full_sentences_only():
    pairs = ding_pairs(io.StringIO(DING))
    assert pairs == [
        ("Das ist nur scheinbar paradox.", "This is only seemingly a paradox."),
        ("Er ließ sich leicht überreden.", "He was easily persuaded."),
        ("Was es nicht alles gibt!", "It’s amazing what’s out there!"),
        ("Er lobte ihre Kochkunst.", "He praised her cooking."),  # annotations dropped, duplicate removed
    ]


def test_ding_pairs_rules_one_by_one():
    # fewer than 3 words ("Lass das!"), a ';' list, an unaligned entry (3 German parts, 2 English),
    # a side without final punctuation ("Yes, that is right")
    for line in ("Lass das! :: Leave it now!", "Wir gehen; ihr bleibt. :: We go; you stay.",
                 "Weg | Wege | Das ist der Weg. :: way | This is the way.",
                 "Ja, das stimmt. :: Yes, that is right"):
        assert ding_pairs([line]) == [], line


# --- .mo files ---------------------------------------------------------------------------------------------------
def make_mo(messages: dict[bytes, bytes], endian: str = "<") -> bytes:
    """A minimal compiled catalog (no hash table), the layout GNU msgfmt writes."""
    keys = sorted(messages)
    n = len(keys)
    orig_off, trans_off = 28, 28 + 8 * n
    data_off = 28 + 16 * n
    blob = b""
    orig_tab, trans_tab = [], []
    for k in keys:
        orig_tab.append((len(k), data_off + len(blob)))
        blob += k + b"\x00"
    for k in keys:
        v = messages[k]
        trans_tab.append((len(v), data_off + len(blob)))
        blob += v + b"\x00"
    header = struct.pack(endian + "7I", 0x950412DE, 0, n, orig_off, trans_off, 0, 0)
    tables = b"".join(struct.pack(endian + "2I", *e) for e in orig_tab + trans_tab)
    return header + tables + blob


MO_MESSAGES = {
    b"": b"Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n != 1);\n",
    "Größe ändern".encode(): "Change size".encode(),  # (a reversed catalog is fine for parsing)
    b"Open a file": "Eine Datei öffnen".encode(),
    b"menu\x04_File": b"_Datei",
    b"%d file\x00%d files": b"%d Datei\x00%d Dateien",
}


@pytest.mark.parametrize("endian", ["<", ">"])
def test_read_mo_matches_pythons_gettext(endian, tmp_path):
    data = make_mo(MO_MESSAGES, endian)
    entries = read_mo(data)
    assert [(e.context, e.msgid, e.msgstr) for e in entries] == [
        (None, "Größe ändern", "Change size"),
        (None, "Open a file", "Eine Datei öffnen"),
        ("menu", "_File", "_Datei"),
    ]  # header and the plural entry are skipped; order is the file's (msgids sorted as bytes)
    path = tmp_path / "x.mo"
    path.write_bytes(data)
    catalog = gettext.GNUTranslations(io.BytesIO(data))._catalog
    singular = {k: v for k, v in catalog.items() if isinstance(k, str) and k}
    mine = {(e.context + "\x04" if e.context else "") + e.msgid: e.msgstr for e in read_mo(path)}
    assert mine == singular


def test_read_mo_decodes_in_the_charset_its_header_names(tmp_path):
    """A Latin-1 catalog is read as gettext reads it (it used to raise UnicodeDecodeError naming no file); bytes
    not valid in the header's charset, or an unknown charset, are a ValueError naming the file."""
    messages = {b"": b"Content-Type: text/plain; charset=ISO-8859-1\n", b"menu\x04Size": "Größe".encode("latin-1")}
    data = make_mo(messages)
    assert [(e.context, e.msgid, e.msgstr) for e in read_mo(data)] == [("menu", "Size", "Größe")]
    assert gettext.GNUTranslations(io.BytesIO(data))._catalog["menu\x04Size"] == "Größe"
    bad = tmp_path / "bad.mo"
    bad.write_bytes(make_mo({b"": b"Content-Type: text/plain; charset=UTF-8\n", b"Size": "Größe".encode("latin-1")}))
    with pytest.raises(ValueError, match=r"bad\.mo: \.mo message 1 is not valid UTF-8 .*byte 0xf6 at offset 2"):
        read_mo(bad)
    with pytest.raises(ValueError, match="charset 'CHARSET', which Python does not know"):
        read_mo(make_mo({b"": b"Content-Type: text/plain; charset=CHARSET\n", b"Size": b"Groesse"}))


def test_read_mo_refuses_a_bad_magic_number():
    with pytest.raises(ValueError, match="magic number 0x950412de expected, got 0x00000000"):
        read_mo(bytes(28))


def test_read_mo_refuses_a_truncated_file():
    data = make_mo(MO_MESSAGES)
    with pytest.raises(ValueError, match="runs past the end of the file"):
        read_mo(data[:-20])
    with pytest.raises(ValueError, match="at least 20 bytes, got 3"):
        read_mo(b"\xde\x12\x04")
    # cut inside the tables of (length, offset) pairs: a ValueError too, not struct.error
    with pytest.raises(ValueError, match=r"\.mo table entry \d+ at byte \d+ runs past the end of the file"):
        read_mo(data[:30])


# --- catalog cleaning: one test per rule ------------------------------------------------------------------------
@pytest.mark.parametrize("english,german,reason", [
    ("Folder '%s' not found", "Ordner »%s« wurde nicht gefunden", "placeholder"),
    ("read-only reference %qD used", "schreibgeschützte Referenz %qD verwendet", "placeholder"),
    ("Delete the meeting “{0}”?", "Die Besprechung »{0}« löschen?", "placeholder"),
    ("Cannot save template: $1", "Die Dokumentvorlage $1 lässt sich nicht speichern", "placeholder"),
    ("Version $(ARG1) is required.", "Version $(ARG1) wird benötigt.", "placeholder"),
    ("<b>Warning</b>", "<b>Warnung</b>", "markup"),
    ("Copy &amp; paste", "Kopieren &amp; einfügen", "markup"),
    ("See https://docs.gimp.org/", "Siehe https://docs.gimp.org/", "url"),
    ("Mail john.doe@example.org", "Mail an max@beispiel.org", "url"),
    ("-march=ARCH\tGenerate code.", "-march=ARCH\tCode erzeugen.", "tab"),
    ("const_double_split got a bad insn", "const_double_split bekam einen falschen Befehl", "accelerator"),
    ("_Save _As", "_Speichern _unter", "accelerator"),
    ("Back", "Back", "identical"),
    ("CHISQINV", "CHIQUINV", "code name"),
    ("node is in same group list", "Interner Fehler: node is in same group list", "untranslated"),
    ("0-59", "0–59", "no letters"),
    (" ", "Leer", "empty"),
    ("word " * 100, "Wort " * 100, "too long"),
])
def test_clean_catalog_pair_rejects(english, german, reason):
    assert clean_catalog_pair(english, german) == (None, reason)


@pytest.mark.parametrize("english,german,expected", [
    ("_Skip", "Ü_berspringen", ("Überspringen", "Skip")),  # GTK mnemonic
    ("~Notify", "~Benachrichtigen", ("Benachrichtigen", "Notify")),  # LibreOffice mnemonic
    ("&Open", "Ö&ffnen", ("Öffnen", "Open")),  # Qt mnemonic
    ("Indents & Spacing", "Einzüge und Abstände", ("Einzüge und Abstände", "Indents & Spacing")),  # a real '&'
    ("Zoom 50 %", "Vergrößerung 50 %", ("Vergrößerung 50 %", "Zoom 50 %")),  # a percent sign, not a placeholder
    ("resolve merge conflicts first", "lösen\nSie zuerst die Konflikte auf", ("lösen Sie zuerst die Konflikte auf",
                                                                             "resolve merge conflicts first")),
])
def test_clean_catalog_pair_keeps_and_cleans(english, german, expected):
    assert clean_catalog_pair(english, german) == (expected, "ok")


def test_catalog_pairs_reads_mo_files_dedupes_and_counts_reasons(tmp_path):
    a = tmp_path / "a.mo"
    a.write_bytes(make_mo({b"Open a file": "Eine Datei öffnen".encode(), b"%s found": b"%s gefunden"}))
    b = tmp_path / "b.mo"
    b.write_bytes(make_mo({b"ctx\x04Open a file": "Eine Datei öffnen".encode(), b"Close": "Schließen".encode()}))
    pairs, reasons = catalog_pairs([a, b])
    assert pairs == [("Eine Datei öffnen", "Open a file"), ("Schließen", "Close")]
    assert reasons == {"ok": 2, "duplicate": 1, "placeholder": 1}


def test_story_pairs_split_narration_into_sentences_and_drop_contexts(tmp_path):
    narration = ("The river was wide. We crossed it at night, and nobody saw us.",
                 "Der Fluss war breit. Wir überquerten ihn nachts, und niemand sah uns.")
    mo = tmp_path / "wesnoth-x.mo"
    mo.write_bytes(make_mo({
        narration[0].encode(): narration[1].encode(),  # two sentences on each side: they pair up
        "female^Battle Princess".encode(): "Kriegsprinzessin".encode(),  # Wesnoth's context prefix is removed
        "We have you now, mortals!".encode(): "Jetzt haben wir euch, Sterbliche!".encode(),
        "You have $turns turns left.".encode(): "Ihr habt noch $turns Runden.".encode(),  # a placeholder
        ("One long sentence about the war, " * 20 + "the end.").encode():
            ("Ein langer Satz über den Krieg, " * 20 + "das Ende.").encode(),  # no catalog length limit here
    }))
    pairs, reasons = story_pairs([mo])
    assert ("Der Fluss war breit.", "The river was wide.") in pairs
    assert ("Wir überquerten ihn nachts, und niemand sah uns.", "We crossed it at night, and nobody saw us.") in pairs
    assert ("Kriegsprinzessin", "Battle Princess") in pairs
    assert ("Jetzt haben wir euch, Sterbliche!", "We have you now, mortals!") in pairs
    assert reasons["placeholder"] == 1 and not any("$" in de for de, _ in pairs)
    assert clean_catalog_pair("word " * 100, "Wort " * 100, max_chars=None)[1] == "ok"
    # the same message twice (two campaigns) gives its pairs once
    assert story_pairs([mo, mo])[0] == pairs


# --- the split -----------------------------------------------------------------------------------------------------
def _pool(n: int) -> list[tuple[str, str]]:
    return [(f"Das ist Satz Nummer {i}.", f"This is sentence number {i}.") for i in range(n)]


def test_split_sizes_determinism_and_no_leakage():
    pool = _pool(60) + [("DAS IST SATZ NUMMER 1.", "A variant of one.")]  # casefold-equal German
    extra = [(f"Knopf {i}", f"Button {i}") for i in range(20)]
    extra += [("Das ist Satz Nummer 5.", "Catalog copy.")]  # shares a German string with the pool
    splits, removed = split_pairs(pool, extra, n_test=10, n_valid=5, seed=3)
    again, _ = split_pairs(pool, extra, n_test=10, n_valid=5, seed=3)
    other, _ = split_pairs(pool, extra, n_test=10, n_valid=5, seed=4)
    assert splits == again and splits["test"] != other["test"]
    assert len(splits["test"]) == 10 and len(splits["valid"]) == 5
    assert all(p in pool for p in splits["test"] + splits["valid"])  # evaluation only from the pool
    held_de = {d.casefold() for d, _ in splits["test"] + splits["valid"]}
    held_en = {e.casefold() for _, e in splits["test"] + splits["valid"]}
    assert len(held_de) == len(held_en) == 15  # evaluation strings are distinct
    assert not any(d.casefold() in held_de or e.casefold() in held_en for d, e in splits["train"])
    # every pair is accounted for: train + evaluation + removed for overlap
    assert len(splits["train"]) + 15 + removed == len(pool) + len(extra)


def test_split_refuses_a_pool_that_is_too_small():
    with pytest.raises(ValueError, match=r"need 10 test \+ 5 valid pairs .* got 10 \+ 2 from 12 pairs"):
        split_pairs(_pool(12), [], n_test=10, n_valid=5)


# --- the recipe, offline (apt and dpkg replaced by fakes) ------------------------------------------------------
def _fake_fetchers(monkeypatch, calls: list[str]):
    def fake_apt_download(package, dest, sha256=None, version=None):
        dest.mkdir(parents=True, exist_ok=True)
        deb = dest / f"{package}_1.0-1_all.deb"
        if not deb.exists():
            calls.append(package)
            deb.write_bytes(f"fake deb {package}".encode())
        return deb, "1.0-1"

    def fake_dpkg_extract(deb, dest):
        package = deb.name.split("_")[0]
        if package == "trans-de-en":
            f = dest / "usr/share/trans/de-en"
            f.parent.mkdir(parents=True)
            f.write_text("".join(f"Satz {{m}} | Das ist Satz Nummer {i}. :: sentence | This is sentence number {i}.\n"
                                 for i in range(40)), encoding="utf-8")
        elif package.startswith("wesnoth"):
            f = dest / "usr/share/games/wesnoth/1.16/locale/de/LC_MESSAGES/wesnoth-x.mo"
            f.parent.mkdir(parents=True)
            f.write_bytes(make_mo({f"We must defend the village number {i} now.".encode():
                                   f"Wir müssen jetzt das Dorf Nummer {i} verteidigen.".encode() for i in range(4)}))
        else:
            f = dest / "usr/share/locale/de/LC_MESSAGES/x.mo"
            f.parent.mkdir(parents=True)
            f.write_bytes(make_mo({f"Open file {i} of {package}".encode(): f"Datei {i} von {package} öffnen".encode()
                                   for i in range(5)}))
        return dest

    monkeypatch.setattr(de_en, "apt_download", fake_apt_download)
    monkeypatch.setattr(de_en, "dpkg_extract", fake_dpkg_extract)
    monkeypatch.setattr(de_en, "PACKAGES", (
        de_en.DebSource("trans-de-en", "GPL-2+", "ding", ("usr/share/trans/de-en",)),
        de_en.DebSource("git", "GPL-2", "gettext", ("usr/share/locale/de/LC_MESSAGES/*.mo",)),
        de_en.DebSource("wesnoth-1.16-httt", "GPL-2+", "story",
                        ("usr/share/games/wesnoth/1.16/locale/de/LC_MESSAGES/*.mo",)),
    ))
    monkeypatch.setattr(de_en, "N_TEST", 6)
    monkeypatch.setattr(de_en, "N_VALID", 4)
    monkeypatch.setattr(de_en, "N_TEST_DOCS", 3)
    monkeypatch.setattr(de_en.debian_descriptions, "fetch_translation_indexes", _fake_indexes)
    monkeypatch.setattr(de_en, "KNOWN_INDEXES", {})  # filled by _fake_indexes with the fakes' checksums


def _fake_indexes(dest):
    """Translation-de/-en and Packages indexes with four source packages of two descriptions each."""
    dest.mkdir(parents=True, exist_ok=True)
    de, en, packages = [], [], []
    for i in range(8):
        source = f"src{i // 2}"
        de.append(f"Package: pkg{i}\nDescription-md5: {i:032x}\nDescription-de: Werkzeug Nummer {i}\n"
                  f" Dieses Paket enthält das Werkzeug Nummer {i} für die Konsole.\n")
        en.append(f"Package: pkg{i}\nDescription-md5: {i:032x}\nDescription-en: tool number {i}\n"
                  f" This package contains the tool number {i} for the console.\n")
        packages.append(f"Package: pkg{i}\nSource: {source}\nVersion: 1.0\n")
    paths = {}
    for kind, stanzas in (("de", de), ("en", en), ("packages", packages)):
        path = dest / {"de": "x_i18n_Translation-de", "en": "x_i18n_Translation-en", "packages": "x_Packages"}[kind]
        path.write_text("\n".join(stanzas), encoding="utf-8")
        paths[kind] = [path]
        if kind in ("de", "en"):
            de_en.KNOWN_INDEXES[kind] = sha256_file(path)
    return paths


def test_recipe_offline_writes_splits_and_source_record_and_is_cached(monkeypatch, tmp_path, capsys):
    from attnkit.data.corpora.registry import get_recipe, prepare

    calls: list[str] = []
    _fake_fetchers(monkeypatch, calls)
    assert get_recipe("de-en").kind == "mt"
    root = prepare("de-en", home=tmp_path)
    fetched = ["trans-de-en", "git", "wesnoth-1.16-httt"]
    assert root == tmp_path / "data" / "de-en" and calls == fetched
    out = capsys.readouterr().out
    # 30 dictionary pairs x DING_WEIGHT 3 + 5 catalog pairs + 4 story pairs + 2 source packages x 2 descriptions
    # x 2 pairs
    assert "train 107 (dictionary ×3) / valid 4 / test 6 / test-docs 3 / in-domain 34" in out, out
    assert "unique train pairs per source: dictionary 30, catalogs 5, stories 4, libreoffice_help 0, man_pages 0, gnome_help 0, manuals 0, descriptions 8" in out, out
    record = json.loads((root / "SOURCE.json").read_text(encoding="utf-8"))
    assert record["counts"]["dictionary_sentences"] == 40 and record["counts"]["catalog_pairs"] == 5
    assert record["counts"]["story_pairs"] == 4
    assert record["counts"]["description_pairs"] == 16 and record["counts"]["test_docs_documents"] == 2
    assert [i["index"] for i in record["apt_indexes"]] == ["x_i18n_Translation-de", "x_i18n_Translation-en", "x_Packages"]
    assert [p["package"] for p in record["packages"]] == fetched
    assert record["packages"][1]["sha256"] == sha256_file(root / "debs" / "git_1.0-1_all.deb")
    splits = {s: read_tsv(root / f"{s}.tsv") for s in ("train", "valid", "test", "test-docs")}
    assert {s: len(c) for s, c in splits.items()} == {"train": 107, "valid": 4, "test": 6, "test-docs": 3}
    # test-docs: whole source packages held out; none of their sentences (or short descriptions) in train
    held_sources = {int(re.search(r"Werkzeug Nummer (\d)", d).group(1)) // 2 for d in splits["test-docs"].sources}
    assert len(held_sources) == 2
    train_numbers = {int(m.group(1)) for d in splits["train"].sources if (m := re.search(r"Werkzeug Nummer (\d)", d))}
    assert {n // 2 for n in train_numbers} == {0, 1, 2, 3} - held_sources
    assert all(s.endswith("Konsole.") for s in splits["test-docs"].sources)
    for s, c in splits.items():
        assert record["outputs"][f"{s}.tsv"]["sha256"] == sha256_file(root / f"{s}.tsv")
        assert c.skipped == 0
    assert all(d.startswith("Das ist Satz") for d in splits["test"].sources + splits["valid"].sources)
    # mixing: every dictionary pair of train is there DING_WEIGHT times, every other pair once
    counts = collections.Counter(zip(splits["train"].sources, splits["train"].targets))
    assert {n for p, n in counts.items() if p[0].startswith("Das ist Satz")} == {de_en.DING_WEIGHT}
    assert {n for p, n in counts.items() if not p[0].startswith("Das ist Satz")} == {1}
    # valid, test and test-docs share no German and no English string with train (nor with each other)
    for side in ("sources", "targets"):
        held = [getattr(splits[s], side) for s in ("valid", "test", "test-docs")]
        assert not set(getattr(splits["train"], side)) & set().union(*map(set, held))
        assert sum(map(len, held)) == len(set().union(*map(set, held)))
    # in-domain.tsv: the train pairs of the dictionary and of the story catalogs, once each, nothing else
    in_domain = read_tsv(root / "in-domain.tsv")
    in_pairs = list(zip(in_domain.sources, in_domain.targets))
    assert len(in_pairs) == len(set(in_pairs)) == 34 and set(in_pairs) <= set(counts)
    assert {p for p in counts if p[0].startswith(("Das ist Satz", "Wir müssen"))} == set(in_pairs)
    assert record["outputs"]["in-domain.tsv"]["sha256"] == sha256_file(root / "in-domain.tsv")
    assert record["counts"]["in-domain"] == 34
    digests = {s: sha256_file(root / f"{s}.tsv") for s in [*splits, "in-domain"]}

    # second call: cached, nothing fetched, nothing rewritten
    before = (root / "train.tsv").stat().st_mtime_ns
    assert prepare("de-en", home=tmp_path) == root
    assert calls == fetched and (root / "train.tsv").stat().st_mtime_ns == before

    # a damaged output is noticed and rebuilt from the cached .debs
    (root / "test.tsv").write_text("kaputt\tbroken\n", encoding="utf-8")
    prepare("de-en", home=tmp_path)
    assert len(read_tsv(root / "test.tsv")) == 6 and calls == fetched
    (root / "in-domain.tsv").unlink()  # a missing one too
    prepare("de-en", home=tmp_path)
    assert len(read_tsv(root / "in-domain.tsv")) == 34 and calls == fetched

    # force: rebuild from the cached packages (verified against their pins by apt_download), never deleting them:
    # they may be the pinned .debs a user put there for an offline build
    debs = sorted(p.name for p in (root / "debs").iterdir())
    prepare("de-en", home=tmp_path, force=True)
    assert calls == fetched and sorted(p.name for p in (root / "debs").iterdir()) == debs
    assert {s: sha256_file(root / f"{s}.tsv") for s in digests} == digests  # deterministic: byte-identical


def test_recipe_refuses_translation_indexes_other_than_the_pinned_ones(monkeypatch, tmp_path):
    _fake_fetchers(monkeypatch, [])

    def changed_indexes(dest):
        paths = _fake_indexes(dest)
        de_en.KNOWN_INDEXES["de"] = "0" * 64  # the mirror now serves another Translation-de
        return paths

    monkeypatch.setattr(de_en.debian_descriptions, "fetch_translation_indexes", changed_indexes)
    with pytest.raises(FetchError, match=r"Translation-de index changed: this recipe is pinned to sha256 0{64}.*"
                                         r"x_i18n_Translation-de [0-9a-f]{64}"):
        de_en.prepare_de_en(tmp_path)


def test_recipe_reports_a_package_whose_layout_changed(monkeypatch, tmp_path):
    calls: list[str] = []
    _fake_fetchers(monkeypatch, calls)
    monkeypatch.setattr(de_en, "PACKAGES", (de_en.DebSource("git", "GPL-2", "gettext", ("usr/share/nowhere/*.mo",)),))
    with pytest.raises(RuntimeError, match=r"git 1.0-1 contains none of \['usr/share/nowhere/\*.mo'\]"):
        de_en.prepare_de_en(tmp_path)


# --- the real thing ------------------------------------------------------------------------------------------------
@pytest.mark.network
def test_real_recipe_end_to_end(attnkit_test_home):
    """Runs the real recipe into the test cache (downloads ~230 MB of .debs the first time, then cached)."""
    from attnkit.data.corpora.registry import prepare

    root = prepare("de-en", home=attnkit_test_home)
    record = json.loads((root / "SOURCE.json").read_text(encoding="utf-8"))
    counts = record["counts"]
    assert counts["test"] == 2000 and counts["valid"] == 1000
    assert 15_000 <= counts["dictionary_sentences"] <= 25_000
    assert 30_000 <= counts["catalog_pairs"] <= 45_000 and 12_000 <= counts["story_pairs"] <= 25_000
    assert 35_000 <= counts["description_pairs"] <= 60_000 and counts["test-docs"] == 2000
    assert 35_000 <= counts["help_pairs"] <= 55_000
    assert 35_000 <= counts["man_pairs"] <= 55_000
    assert 5_000 <= counts["gnome_help_pairs"] <= 9_000 and 6_000 <= counts["manual_pairs"] <= 12_000
    assert counts["train"] >= 200_000
    # in-domain: the dictionary's and the stories' train pairs (a few story pairs are also catalog messages and
    # count as catalogs in train_unique_per_source)
    per_source = counts["train_unique_per_source"]
    assert 0 <= counts["in-domain"] - per_source["dictionary"] - per_source["stories"] <= 100
    in_domain = read_tsv(root / "in-domain.tsv", strict=True)
    assert len(in_domain) == counts["in-domain"]
    assert {p["package"] for p in record["packages"]} == {s.package for s in de_en.PACKAGES}
    splits = {s: read_tsv(root / f"{s}.tsv", strict=True) for s in ("train", "valid", "test", "test-docs")}
    assert {s: len(c) for s, c in splits.items()} == {s: counts[s] for s in splits}
    assert set(zip(in_domain.sources, in_domain.targets)) <= set(zip(splits["train"].sources, splits["train"].targets))
    held_de = {d.casefold() for s in ("valid", "test", "test-docs") for d in splits[s].sources}
    held_en = {e.casefold() for s in ("valid", "test", "test-docs") for e in splits[s].targets}
    assert not any(d.casefold() in held_de for d in splits["train"].sources)
    assert not any(e.casefold() in held_en for e in splits["train"].targets)
    # evaluation pairs are full sentences (they come from the dictionary)
    assert all(e[-1] in ".!?" and len(e.split()) >= 3 for e in splits["test"].targets)
    assert all(e[-1] in ".!?" and len(e.split()) >= 5 for e in splits["test-docs"].targets)
