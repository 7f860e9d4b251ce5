"""istar-tune: hyperparameter search for fine-tuning transformer encoders with isotropy regularisers."""

__version__ = "0.1.0"
