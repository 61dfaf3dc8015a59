// placeholder until the first real source of halogen::quant lands; removed then
