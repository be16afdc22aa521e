// replaced by the analysis module
