"""English (American) text normalization."""

from .normalizer import ENGLISH_RULES, EnglishNormalizer

__all__ = ["ENGLISH_RULES", "EnglishNormalizer"]
