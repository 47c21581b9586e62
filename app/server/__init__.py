"""What the server holds for every session: cached models and attention results, uploads on disk, whether a
session is still there, and the model picker that loads through ``core.load_untrusted``. Never imports
``app.views``."""
