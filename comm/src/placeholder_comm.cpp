// placeholder until the first real source of halogen::comm lands; removed then
