"""render/html: report.html, one self-contained page from records (Jinja2 templates, matplotlib pictures); imports
analysis, core and render's own table and plot modules, as the rest of render does.

bench validate writes it beside its record; bench report --html writes it from any records.
"""
