"""The publisher's command line (the application, beside ``run.py``): argument types
(:mod:`cli.arguments`), what is printed (:mod:`cli.output`) and the hint for each next step a
refusal carries (:mod:`cli.hints`). The library (``state/``, ``workflow/``) never imports it."""
