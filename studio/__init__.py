"""UI support for the GRADE Studio Streamlit app (``streamlit run app.py``).

The :mod:`grade` package knows nothing about Streamlit; this package is the thin layer between them:

* :mod:`studio.resources` - models, probes and the reference feature set, shared across sessions
  (the Streamlit-free parts are plain classes; ``st.cache_resource`` only makes them singletons);
* :mod:`studio.figures` - Plotly figure builders (pure functions of arrays, no Streamlit);
* :mod:`studio.projections` - t-SNE / UMAP embeddings of a labelled question set (no Streamlit);
* :mod:`studio.tokens` - the coloured-token heatmap as HTML (no Streamlit);
* :mod:`studio.analysis_cache` - the bounded cache of Home's analyses (no Streamlit);
* :mod:`studio.queue` - the queue of analyses per model shared by all sessions: positions, estimates, one
  ticket per user, cancelling, identical requests computed once, a cap on running analyses (no Streamlit);
* :mod:`studio.ray_serve` - Home's analyses on Ray Serve replicas (``GRADE_BACKEND``; no Streamlit);
* :mod:`studio.summaries` - sentences computed from the numbers a page shows, term explanations (no Streamlit);
* :mod:`studio.session` - sidebar, per-session state, error display and downloads (Streamlit).
"""
