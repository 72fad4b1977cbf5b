"""indexer: turns documents into stored sentence vectors and normalisation statistics.

Builds on the model core (:mod:`sdr_core`: segmentation, encoder, exact scoring, stats). The
embedded store and the OpenSearch backend arrive with the "Embedded engine" and "OpenSearch
backend" issues; nothing here connects to anything at import.
"""
