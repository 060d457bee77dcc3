"""Pure renderers: a frozen ReportData in, markdown / PNG / CSV out."""
