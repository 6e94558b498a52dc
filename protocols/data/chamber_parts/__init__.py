"""Claim files on the chamber's other parts (beyond the seed paper's 37): graded with --claims this folder."""
