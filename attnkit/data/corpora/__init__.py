"""Corpora: what ``--data`` names, from the package registries or from local files.

Recipes (``registry.py``; ``attnkit data list``): ``shakespeare.py``, ``fortunes.py`` and ``de_en.py`` with the
Debian sources its pairs come from (``debian_descriptions.py``, ``gnome_help.py``, ``libreoffice_help.py``,
``html_manuals.py``, ``man_pages.py``) and ``pair_filters.py`` (the one rule that admits a sentence pair).
Local files: ``text.py`` (a text file or folder for language modelling) and ``parallel.py`` (TSV or two
line-aligned files for translation; recipe names resolved to their prepared folders).
"""
