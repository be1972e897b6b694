"""The Saleor substrate (Incident-Arena 006): importing this package registers substrate "saleor"."""

from arena.twin.saleor.substrate import SaleorSubstrate

__all__ = ["SaleorSubstrate"]
